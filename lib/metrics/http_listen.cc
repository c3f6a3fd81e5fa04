#include "lib/metrics/http_listen.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::metrics {

absl::StatusOr<int> BindHttpServer(httplib::Server& server, const std::string& host, int port,
                                   const std::string& what) {
  // httplib offers no handle on its listening socket; the options hook sees each socket it
  // tries, and the last one is the one bound.
  auto listener = std::make_shared<socket_t>(-1);
  server.set_socket_options([listener](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listener = sock;
  });
  const int bound = port == 0 ? server.bind_to_any_port(host)
                              : (server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    return absl::UnavailableError(absl::StrCat(what, " cannot bind ", host, ":",
                                               port == 0 ? "<any port>" : std::to_string(port),
                                               " (port in use or bad host)"));
  }
  // A second listen() on a listening socket only changes its backlog (Linux).
  if (*listener >= 0 && listen(*listener, SOMAXCONN) != 0) {
    LOG(WARNING) << what << ": could not raise the listen backlog: " << std::strerror(errno);
  }
  return bound;
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
