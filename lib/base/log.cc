#include "lib/base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace oscarkv {
namespace {
std::atomic<int> verbosity{0};
std::atomic<int> min_log_level{0};
}  // namespace

void SetVerbosity(int level) { verbosity.store(level, std::memory_order_relaxed); }
int Verbosity() { return verbosity.load(std::memory_order_relaxed); }
void SetMinLogLevel(int level) { min_log_level.store(level, std::memory_order_relaxed); }
int MinLogLevel() { return min_log_level.load(std::memory_order_relaxed); }

namespace log_internal {

LogMessage::LogMessage(const char* file, int line, Severity severity) : severity_(severity) {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm_utc;
  gmtime_r(&secs, &tm_utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%m%d %H:%M:%S", &tm_utc);
  std::string_view path(file);
  const size_t slash = path.rfind('/');
  if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  char micro_text[8];
  std::snprintf(micro_text, sizeof(micro_text), "%06lld", static_cast<long long>(micros));
  stream_ << kLetters[static_cast<int>(severity)] << stamp << '.' << micro_text << ' ' << path
          << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write() per message keeps lines from different threads whole.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  if (severity_ == Severity::kFatal) std::abort();
}

}  // namespace log_internal
}  // namespace oscarkv
