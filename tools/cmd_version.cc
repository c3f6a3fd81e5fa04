// `oscarkv version`: prints the build's format version and the codecs it knows.
#include <iostream>

#include "CLI/CLI.hpp"
#include "lib/kvformat/int2_block.h"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

void RegisterVersionCommand(CLI::App& app, CommandResult& result) {
  CLI::App* cmd = app.add_subcommand("version", "Print the oscarkv block format version");
  cmd->callback([&result] {
    std::cout << "oscarkv block format v" << kvformat::kFormatVersion << "\n";
    result.status = absl::OkStatus();
  });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterVersionCommand);
}  // namespace oscarkv::tools
