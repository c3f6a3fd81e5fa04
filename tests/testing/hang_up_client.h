// A client that gives up: POSTs a JSON body over a plain socket and closes it after a wait
// without reading the answer (httplib's client offers no way to walk away mid-request).
#ifndef OSCARKV_TESTS_TESTING_HANG_UP_CLIENT_H_
#define OSCARKV_TESTS_TESTING_HANG_UP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace oscarkv::testing {

inline void PostThenHangUp(int port, const std::string& body, absl::Duration wait,
                           const std::string& path = "/v1/completions") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request = absl::StrCat(
      "POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: ", body.size(), "\r\n\r\n", body);
  ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  absl::SleepFor(wait);
  close(fd);
}

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_TESTING_HANG_UP_CLIENT_H_
