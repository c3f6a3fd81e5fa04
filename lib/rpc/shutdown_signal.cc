#include "lib/rpc/shutdown_signal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>

#include "lib/base/log.h"

namespace oscarkv::rpc {
namespace {

int g_pipe[2] = {-1, -1};

void OnSignal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  const int saved = errno;
  // A full pipe means a signal is already pending; dropping this one is fine.
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void InstallShutdownSignalHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    CHECK(pipe2(g_pipe, O_CLOEXEC) == 0) << "pipe2 failed";
    fcntl(g_pipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
  });
}

int WaitForShutdownSignal() {
  InstallShutdownSignalHandlers();
  unsigned char byte = 0;
  while (true) {
    const ssize_t n = read(g_pipe[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    LOG(ERROR) << "shutdown signal pipe failed; shutting down";
    return SIGTERM;
  }
}

}  // namespace oscarkv::rpc
