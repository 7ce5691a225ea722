// uatlab: the command line. Each command group (tools/cmd_*.cpp) registers its subcommands with
// an options struct of its own and calls the library; every failure is reported as
// "uatlab: error: ..." on stderr with exit status 1 (2 for a malformed command line), and leaves no
// partial output file (outputs are written atomically).
#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uatlab: construct, verify and train the Transformers of expressivity theory"};
  app.formatter(std::make_shared<Formatter>());
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(UATLAB_VERSION));
  app.add_flag("--quiet,-q", uatlab::cli::quiet(), "No progress lines on stderr (anywhere on the line)");
  app.fallthrough();  // subcommands accept --quiet after their name too
  uatlab::cli::Commands commands;
  for (auto add :
       {uatlab::cli::add_model_commands, uatlab::cli::add_kajitsuka_commands, uatlab::cli::add_train_commands,
        uatlab::cli::add_fang_commands, uatlab::cli::add_yun_commands, uatlab::cli::add_reproduce_commands})
    add(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {               // a flag or argument, named by CLI11's message
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "uatlab: error: " << e.what() << " (run with --help for the usage)\n";
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::cerr << "uatlab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
