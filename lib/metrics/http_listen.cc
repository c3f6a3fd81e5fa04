#include "lib/metrics/http_listen.h"

#include <sys/socket.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::metrics {

void BindPortExclusively(httplib::Server& server) {
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

absl::Status ListenInBackground(httplib::Server& server, std::thread* thread,
                                const std::string& what) {
  *thread = std::thread([s = &server, what] {
    if (!s->listen_after_bind()) LOG(WARNING) << what << " stopped with an error";
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      server.stop();
      thread->join();
      return absl::UnavailableError(absl::StrCat(what, " did not start within 10 s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::metrics
