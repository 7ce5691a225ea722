// uatlab: the command line. Each command group (tools/cmd_*.cpp) registers its subcommands with
// an options struct of its own and calls the library; every failure is reported as
// "uatlab: error: ..." on stderr with exit status 1 (2 for a malformed command line), and leaves no
// partial output file (outputs are written atomically).
//
// Two binaries from this file: `uatlab` has the model, certifying and constructing commands and
// links the library's base alone, so that the main job does not wait for training and the
// experiments to compile; it executes `uatlab-lab` (UATLAB_LAB: every command, the whole library),
// found beside it, for the commands of kLabCommands, with the same arguments (docs/building.md).
#include <gmp.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "commands.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/simd.hpp"
#include "uatlab/version.hpp"

namespace {

// CLI11 prints a checked option's type as "INT:INT in [1 - 1073741824]"; this prints
// "INT in [1, 1073741824]".
class Formatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string s = CLI::Formatter::make_option_opts(opt);
    for (const char* type : {"INT", "UINT", "FLOAT", "TEXT"}) {
      const std::string twice = std::string(type) + ":" + type + " in [";
      if (const std::size_t at = s.find(twice); at != std::string::npos) {
        s.erase(at + std::strlen(type), std::strlen(type) + 1);  // the ":TYPE"
        if (const std::size_t dash = s.find(" - ", at); dash != std::string::npos) s.replace(dash, 3, ", ");
      }
    }
    return s;
  }
};

// GMP, and MPFR and MPFI through it, cannot recover from a failed allocation (a handler may not
// throw through them): by default the process aborts with GMP's own message. The CLI ends it as it
// ends every error instead, "uatlab: error:" and status 1; outputs are written atomically at the end,
// so none is left half-written. (The memory estimates refuse most such runs before they start.)
[[noreturn]] void gmp_out_of_memory(std::size_t bytes) {
  char text[200];
  const int n =
      std::snprintf(text, sizeof text,
                    "uatlab: error: out of memory: GMP/MPFR could not allocate %zu bytes (fewer bits, a "
                    "smaller model or data)\n",
                    bytes);
  if (n > 0 && ::write(2, text, static_cast<std::size_t>(n) < sizeof text ? n : sizeof text - 1) < 0) {
  }
  std::_Exit(1);
}
void* gmp_allocate(std::size_t n) {
  void* p = std::malloc(n);
  if (!p) gmp_out_of_memory(n);
  return p;
}
void* gmp_reallocate(void* p, std::size_t, std::size_t n) {
  void* q = std::realloc(p, n);
  if (!q && n) gmp_out_of_memory(n);
  return q;
}
void gmp_release(void* p, std::size_t) {
  std::free(p);
}

// The commands of uatlab-lab (tools/cmd_train.cpp, cmd_fang.cpp, cmd_yun.cpp, cmd_reproduce.cpp).
constexpr std::array<std::string_view, 8> kLabCommands{
    "train", "gradient", "polynomial", "fang-fit", "fang-regression", "approximate", "reproduce", "sweep"};

#ifndef UATLAB_LAB
// The command named on the line (the first argument that is not a flag of the app itself), when it
// is one of uatlab-lab's: execute uatlab-lab beside this binary with the same arguments.
int run_lab_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-q" || a == "--quiet") continue;
    if (std::find(kLabCommands.begin(), kLabCommands.end(), a) == kLabCommands.end()) return -1;
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) {
      std::cerr << "uatlab: error: '" << a
                << "' is a command of uatlab-lab, which is found beside this binary, "
                << "and this binary's own path could not be read (/proc/self/exe: " << ec.message() << ")\n";
      return 1;
    }
    const std::filesystem::path lab = self.parent_path() / "uatlab-lab";
    ::execv(lab.c_str(), argv);
    std::cerr << "uatlab: error: '" << a << "' is a command of " << lab.string() << ", which "
              << (errno == ENOENT ? "is not built (ninja -C build uatlab_lab)"
                                  : "could not be run: " + std::string(std::strerror(errno)))
              << "\n";
    return 1;
  }
  return -1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit makes a write fail (EFBIG, reported) instead of killing the process; a
  // stopping signal removes the temporary of a write in progress, then stops as it would have.
  std::signal(SIGXFSZ, SIG_IGN);
  for (int s : {SIGINT, SIGTERM, SIGHUP})
    std::signal(s, [](int sig) {
      uatlab::remove_partial_output();
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    });
#ifndef UATLAB_LAB
  if (const int status = run_lab_command(argc, argv); status >= 0) return status;
#endif
  mp_set_memory_functions(gmp_allocate, gmp_reallocate, gmp_release);
  CLI::App app{"uatlab: construct, verify and train the Transformers of expressivity theory"};
  app.formatter(std::make_shared<Formatter>());
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(UATLAB_VERSION));
  app.add_flag("--quiet,-q", uatlab::cli::quiet(), "No progress lines on stderr (anywhere on the line)");
  app.fallthrough();  // subcommands accept --quiet after their name too
  uatlab::cli::Commands commands;
  for (auto add : {uatlab::cli::add_model_commands, uatlab::cli::add_kajitsuka_commands})
    add(app, commands);
#ifdef UATLAB_LAB
  for (auto add : {uatlab::cli::add_train_commands, uatlab::cli::add_fang_commands,
                   uatlab::cli::add_yun_commands, uatlab::cli::add_reproduce_commands})
    add(app, commands);
#else
  std::string lab;
  for (std::string_view c : kLabCommands)
    lab += (lab.empty() ? "" : ", ") + std::string(c);
  app.footer(
      "Training and experiments (uatlab-lab, run by uatlab with the same arguments; each has its "
      "--help):\n  " +
      lab);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {               // a flag or argument, named by CLI11's message
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "uatlab: error: " << e.what() << " (run with --help for the usage)\n";
    return 2;
  }
  try {
    uatlab::simd::select_path();  // UATLAB_SIMD checked before any work
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::cerr << "uatlab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
