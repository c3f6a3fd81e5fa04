#include "tools/commands.h"

#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "lib/model/model.h"

namespace oscarkv::tools {

absl::Status RequireTokenizer(const model::Model& m, std::string_view command) {
  if (m.has_tokenizer()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "oscarkv ", std::string(command), " needs a tokenizer: the model has none (a Hugging Face ",
      "checkpoint needs tokenizer.json next to config.json)"));
}

CLI::Validator NotNegative() {
  return CLI::Validator(
      [](std::string& s) { return s.starts_with('-') ? "must be >= 0, got " + s : std::string(); },
      "");
}

std::vector<CommandRegistrar>& CommandRegistry() {
  static auto* registry = new std::vector<CommandRegistrar>();
  return *registry;
}

}  // namespace oscarkv::tools
