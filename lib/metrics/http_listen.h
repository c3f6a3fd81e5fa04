// Starting a bound cpp-httplib server on its own thread without losing an early stop().
#ifndef OSCARKV_LIB_METRICS_HTTP_LISTEN_H_
#define OSCARKV_LIB_METRICS_HTTP_LISTEN_H_

#include <httplib.h>

#include <string>
#include <thread>

#include "absl/status/status.h"

namespace oscarkv::metrics {

// Runs `server.listen_after_bind()` (the server is bound already) on `*thread` and returns once
// the server is accepting. Why wait: httplib's stop() before listen_after_bind() marks the server
// running is lost, and the thread would then block in accept() forever (a destructor joining it
// hangs). @return kUnavailable naming `what` when it does not start within 10 s (then stopped and
// joined).
absl::Status ListenInBackground(httplib::Server& server, std::thread* thread,
                                const std::string& what);

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_HTTP_LISTEN_H_
