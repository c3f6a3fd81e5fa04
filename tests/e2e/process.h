// A child process for e2e tests: fork/exec with stdout+stderr on a pipe, wait for a startup line
// matching a regex (captures returned), keep draining the pipe on a thread (kept for failure
// messages), SIGTERM on Stop, SIGKILL in the destructor if still running.
#ifndef OSCARKV_TESTS_E2E_PROCESS_H_
#define OSCARKV_TESTS_E2E_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace oscarkv::e2e {

class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  ~Process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  // Starts `argv[0]` with `argv`; returns the regex captures of the first output line matching
  // `ready`, or an empty vector when the process ends first.
  std::vector<std::string> Start(const std::vector<std::string>& argv, const std::string& ready) {
    int fds[2];
    if (pipe(fds) != 0) return {};
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    FILE* in = fdopen(fds[0], "r");
    const std::regex re(ready);
    char line[4096];
    std::vector<std::string> captures;
    while (fgets(line, sizeof(line), in) != nullptr) {
      Append(line);
      std::cmatch m;
      if (std::regex_search(line, m, re)) {
        for (size_t i = 1; i < m.size(); ++i) captures.push_back(m[i]);
        if (captures.empty()) captures.push_back(m[0]);
        break;
      }
    }
    reader_ = std::thread([this, in] {
      char buf[4096];
      while (fgets(buf, sizeof(buf), in) != nullptr) Append(buf);
      fclose(in);
    });
    return captures;
  }

  // SIGTERM, wait; the exit code (or -1 for a signal).
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    if (reader_.joinable()) reader_.join();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string output() {
    std::lock_guard<std::mutex> lock(mu_);
    return output_;
  }

 private:
  void Append(const char* s) {
    std::lock_guard<std::mutex> lock(mu_);
    output_ += s;
  }
  pid_t pid_ = 0;
  std::thread reader_;
  std::mutex mu_;
  std::string output_;
};

}  // namespace oscarkv::e2e

#endif  // OSCARKV_TESTS_E2E_PROCESS_H_
