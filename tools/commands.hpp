// The CLI's command groups. Each group adds its subcommands to the app and, for each, the action
// main() runs when that subcommand was parsed.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "uatlab/model/architecture.hpp"

namespace uatlab::cli {

using Commands = std::vector<std::pair<CLI::App*, std::function<int()>>>;

void add_kajitsuka_commands(CLI::App& app, Commands& commands);
void add_train_commands(CLI::App& app, Commands& commands);
void add_fang_commands(CLI::App& app, Commands& commands);
void add_reproduce_commands(CLI::App& app, Commands& commands);
void add_sweep_commands(CLI::App& app, Commands& commands);
void add_yun_commands(CLI::App& app, Commands& commands);

// An architecture from --arch (JSON text or file) or from --d/--vocab/--max-len/--readout and
// repeated --layer "attention:heads=2,head_size=4" flags.
Architecture architecture_from_flags(const std::string& arch_text, int d, int vocab, int max_len, int readout,
                                     const std::vector<std::string>& layers);

// Write text to a file atomically, or to standard output for "" and "-".
void write_output(const std::string& path, const std::string& text);

// Create a folder and its parents (no error if it exists); throws Error naming it.
void make_dirs(const std::string& dir);

}  // namespace uatlab::cli
