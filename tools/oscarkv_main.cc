// The `oscarkv` command line: one binary, one subcommand per job (serve, generate, calibrate,
// eval, codecs, info, ...). Each subcommand lives in its own tools/cmd_<name>.cc and registers
// itself through tools/commands.h; this file only parses and dispatches.
#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "lib/base/log.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "oscarkv: disaggregated LLM serving with the KV cache stored and moved as OSCAR INT2.\n"
      "Run `oscarkv <command> --help` for a command's flags."};
  app.require_subcommand(1);
  int verbosity = 0;
  app.add_option("-v,--verbosity", verbosity, "VLOG level (0: lifecycle only, 2: per block)")
      ->default_val(0);
  oscarkv::tools::CommandResult result;
  for (const auto& registrar : oscarkv::tools::CommandRegistry()) registrar(app, result);
  app.parse_complete_callback([&] { oscarkv::SetVerbosity(verbosity); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports a misspelt command as a missing one ("A subcommand is required"); name it.
    const std::string first = argc > 1 ? argv[1] : "";
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !first.empty() &&
        first[0] != '-') {
      std::string names;
      for (const CLI::App* cmd : app.get_subcommands({})) {
        names += (names.empty() ? "" : ", ") + cmd->get_name();
      }
      std::cerr << "oscarkv: unknown command '" << first << "'; commands: " << names << "\n";
      return EXIT_FAILURE;
    }
    return app.exit(e);
  }
  if (!result.status.ok()) {
    std::cerr << "oscarkv: " << result.status.message() << " ("
              << absl::StatusCodeToString(result.status.code()) << ")\n";
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
