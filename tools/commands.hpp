// The CLI's command groups. Each group adds its subcommands to the app and, for each, the action
// main() runs when that subcommand was parsed.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace uatlab::cli {

using Commands = std::vector<std::pair<CLI::App*, std::function<int()>>>;

void add_kajitsuka_commands(CLI::App& app, Commands& commands);

// Write text to a file atomically, or to standard output for "" and "-".
void write_output(const std::string& path, const std::string& text);

}  // namespace uatlab::cli
