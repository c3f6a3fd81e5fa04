// Binding and starting a cpp-httplib server: one port to one server, and listening on its own
// thread without losing an early stop().
#ifndef OSCARKV_LIB_METRICS_HTTP_LISTEN_H_
#define OSCARKV_LIB_METRICS_HTTP_LISTEN_H_

#include <httplib.h>

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace oscarkv::metrics {

// Binds `server` to host:port (port 0: a free one) and returns the port. Unlike httplib's own
// binding:
//   - the port is this server's alone: httplib sets SO_REUSEPORT, which lets a second server
//     silently share a port in use and split its clients (SO_REUSEADDR alone still allows a
//     quick restart after TIME_WAIT);
//   - the listen backlog is SOMAXCONN, not httplib's 5: with 5, a burst of a few more connects
//     than the accept loop had taken waited for TCP's 1 s SYN retry.
// @return kUnavailable naming `what`, host and port when the port cannot be bound.
absl::StatusOr<int> BindHttpServer(httplib::Server& server, const std::string& host, int port,
                                   const std::string& what);

// Runs `server.listen_after_bind()` (the server is bound already) on `*thread` and returns once
// the server is accepting. Why wait: httplib's stop() before listen_after_bind() marks the server
// running is lost, and the thread would then block in accept() forever (a destructor joining it
// hangs). @return kUnavailable naming `what` when it does not start within 10 s (then stopped and
// joined).
absl::Status ListenInBackground(httplib::Server& server, std::thread* thread,
                                const std::string& what);

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_HTTP_LISTEN_H_
