// Binding and starting a cpp-httplib server: one port to one server, and listening on its own
// thread without losing an early stop().
#ifndef OSCARKV_LIB_METRICS_HTTP_LISTEN_H_
#define OSCARKV_LIB_METRICS_HTTP_LISTEN_H_

#include <httplib.h>

#include <string>
#include <thread>

#include "absl/status/status.h"

namespace oscarkv::metrics {

// Makes `server` bind its port alone: httplib's default sets SO_REUSEPORT, which lets a second
// server silently share a port in use and split its clients. SO_REUSEADDR alone still allows a
// quick restart after TIME_WAIT. Call before binding.
void BindPortExclusively(httplib::Server& server);

// Runs `server.listen_after_bind()` (the server is bound already) on `*thread` and returns once
// the server is accepting. Why wait: httplib's stop() before listen_after_bind() marks the server
// running is lost, and the thread would then block in accept() forever (a destructor joining it
// hangs). @return kUnavailable naming `what` when it does not start within 10 s (then stopped and
// joined).
absl::Status ListenInBackground(httplib::Server& server, std::thread* thread,
                                const std::string& what);

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_HTTP_LISTEN_H_
