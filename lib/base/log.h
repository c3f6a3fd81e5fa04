// Logging for the whole project: LOG(INFO|WARNING|ERROR|FATAL), VLOG(n), CHECK*, DCHECK.
// A thin logger of our own (docs/DECISIONS.md, choice 2): Debian's Abseil has no absl/log, and
// glog's gflags-based --v clashes with the flag parser. Levels follow STYLE habit 13.
// Thread-safe: each message is written with one write to stderr.
#ifndef OSCARKV_LIB_BASE_LOG_H_
#define OSCARKV_LIB_BASE_LOG_H_

#include <sstream>
#include <string_view>

namespace oscarkv::log_internal {

enum class Severity { kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

// Collects one message and emits it on destruction; aborts for kFatal.
class LogMessage {
 public:
  LogMessage(const char* file, int line, Severity severity);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  Severity severity_;
  std::ostringstream stream_;
};

// Swallows a stream expression when a log statement is disabled.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace oscarkv::log_internal

namespace oscarkv {

// Verbosity for VLOG(n); messages with n <= level are printed. Default: 0.
void SetVerbosity(int level);
int Verbosity();
// Minimum severity printed by LOG (0 INFO, 1 WARNING, 2 ERROR). Default: 0.
void SetMinLogLevel(int level);
int MinLogLevel();

}  // namespace oscarkv

#define OSCARKV_LOG_INFO ::oscarkv::log_internal::Severity::kInfo
#define OSCARKV_LOG_WARNING ::oscarkv::log_internal::Severity::kWarning
#define OSCARKV_LOG_ERROR ::oscarkv::log_internal::Severity::kError
#define OSCARKV_LOG_FATAL ::oscarkv::log_internal::Severity::kFatal

#define LOG(severity)                                                                     \
  (static_cast<int>(OSCARKV_LOG_##severity) < ::oscarkv::MinLogLevel() &&                 \
   OSCARKV_LOG_##severity != ::oscarkv::log_internal::Severity::kFatal)                   \
      ? (void)0                                                                           \
      : ::oscarkv::log_internal::Voidify() &                                              \
            ::oscarkv::log_internal::LogMessage(__FILE__, __LINE__, OSCARKV_LOG_##severity) \
                .stream()

#define VLOG_IS_ON(n) ((n) <= ::oscarkv::Verbosity())
#define VLOG(n)                                                                          \
  !VLOG_IS_ON(n) ? (void)0                                                               \
                 : ::oscarkv::log_internal::Voidify() &                                  \
                       ::oscarkv::log_internal::LogMessage(                              \
                           __FILE__, __LINE__, ::oscarkv::log_internal::Severity::kInfo) \
                           .stream()

#define CHECK(cond)                                                                         \
  (cond) ? (void)0                                                                          \
         : ::oscarkv::log_internal::Voidify() &                                             \
               ::oscarkv::log_internal::LogMessage(__FILE__, __LINE__,                      \
                                                  ::oscarkv::log_internal::Severity::kFatal) \
                       .stream()                                                            \
                   << "Check failed: " #cond " "

#define CHECK_EQ(a, b) CHECK((a) == (b))
#define CHECK_NE(a, b) CHECK((a) != (b))
#define CHECK_LT(a, b) CHECK((a) < (b))
#define CHECK_LE(a, b) CHECK((a) <= (b))
#define CHECK_GT(a, b) CHECK((a) > (b))
#define CHECK_GE(a, b) CHECK((a) >= (b))
#define CHECK_OK(expr)                                          \
  do {                                                          \
    auto oscarkv_check_status_ = (expr);                        \
    CHECK(oscarkv_check_status_.ok()) << oscarkv_check_status_; \
  } while (false)

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) CHECK(cond)
#else
#define DCHECK(cond) CHECK(cond)
#endif

#endif  // OSCARKV_LIB_BASE_LOG_H_
