#include "tools/commands.h"

namespace oscarkv::tools {

std::vector<CommandRegistrar>& CommandRegistry() {
  static auto* registry = new std::vector<CommandRegistrar>();
  return *registry;
}

}  // namespace oscarkv::tools
