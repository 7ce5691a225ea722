// The CLI's command groups. Each group adds its subcommands to the app, with an options struct
// per subcommand, and for each the action main() runs when that subcommand was parsed.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "uatlab/model/architecture.hpp"
#include "uatlab/progress.hpp"

namespace uatlab::cli {

using Commands = std::vector<std::pair<CLI::App*, std::function<int()>>>;

void add_model_commands(CLI::App& app, Commands& commands);  // info, eval, convert, init, demo
// contextual, memorize, hardmax-counterexample, make-data
void add_kajitsuka_commands(CLI::App& app, Commands& commands);
void add_train_commands(CLI::App& app, Commands& commands);      // train, gradient
void add_fang_commands(CLI::App& app, Commands& commands);       // polynomial, fang-fit, fang-regression
void add_yun_commands(CLI::App& app, Commands& commands);        // approximate
void add_reproduce_commands(CLI::App& app, Commands& commands);  // reproduce, sweep

// An architecture from --arch (JSON text or file) or from --d/--vocab/--max-len/--readout and
// repeated --layer "attention:heads=2,head_size=4" flags.
struct ArchitectureFlags {
  std::string arch;
  int d = 0, vocab = 0, input = 0, max_len = 0, readout = 0;
  std::vector<std::string> layers;
};
void add_architecture_flags(CLI::App* app, ArchitectureFlags& flags);
Architecture architecture_from_flags(const ArchitectureFlags& flags);

// --quiet: no progress lines. progress_reporter() prints long work's stages on stderr (from one
// second on, at most about once a second, with the time so far), or nothing when quiet.
bool& quiet();
OnProgress progress_reporter();

// Write text to a file atomically, or to standard output for "" and "-".
void write_output(const std::string& path, const std::string& text);

}  // namespace uatlab::cli
