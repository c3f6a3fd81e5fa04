// SIGTERM/SIGINT handling for service binaries: a handler that only writes the signal number to a
// self-pipe (async-signal-safe), and a blocking wait on that pipe for main, which then drains.
// Works whichever thread the kernel picks for the signal (libraries may start threads before
// main, so masking signals in main is not enough).
#ifndef OSCARKV_LIB_RPC_SHUTDOWN_SIGNAL_H_
#define OSCARKV_LIB_RPC_SHUTDOWN_SIGNAL_H_

namespace oscarkv::rpc {

// Installs the SIGTERM and SIGINT handlers (call first thing in main). Idempotent.
void InstallShutdownSignalHandlers();
// Waits until SIGTERM or SIGINT arrives; returns the signal number.
int WaitForShutdownSignal();

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_SHUTDOWN_SIGNAL_H_
