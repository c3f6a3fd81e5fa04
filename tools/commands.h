// Registration of `oscarkv` subcommands. A tools/cmd_<name>.cc file defines
//   void Register<Name>Command(CLI::App& app, CommandResult& result);
// which adds a subcommand whose callback stores its outcome in `result.status`, and registers it
// with `OSCARKV_REGISTER_COMMAND(Register<Name>Command);` at namespace scope.
#ifndef OSCARKV_TOOLS_COMMANDS_H_
#define OSCARKV_TOOLS_COMMANDS_H_

#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace CLI {
class App;
class Validator;
}
namespace oscarkv::model {
class Model;
}

namespace oscarkv::tools {

struct CommandResult {
  absl::Status status;  // outcome of the subcommand that ran; Default: OK
};

using CommandRegistrar = std::function<void(CLI::App&, CommandResult&)>;

// kFailedPrecondition naming `command` when `m` has no tokenizer (a Hugging Face checkpoint
// without tokenizer.json loads for token-id use only): commands that turn text into ids need one.
absl::Status RequireTokenizer(const model::Model& m, std::string_view command);

// For unsigned options (seeds): refuses a value typed negative, which CLI11 would otherwise wrap
// to a huge number (and CLI::NonNegativeNumber would print DBL_MAX as its bound).
CLI::Validator NotNegative();

// All registered subcommands, in registration order.
std::vector<CommandRegistrar>& CommandRegistry();

struct CommandRegistration {
  explicit CommandRegistration(CommandRegistrar registrar) {
    CommandRegistry().push_back(std::move(registrar));
  }
};

}  // namespace oscarkv::tools

#define OSCARKV_REGISTER_COMMAND(fn) \
  static const ::oscarkv::tools::CommandRegistration oscarkv_command_##fn(fn)

#endif  // OSCARKV_TOOLS_COMMANDS_H_
