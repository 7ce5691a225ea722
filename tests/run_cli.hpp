// The one harness that runs the built `uatlab` binary (or another, such as uatlab-lab beside it)
// from a test: exit code and the combined standard output and error.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

struct CliResult {
  int code;
  std::string out;  // stdout and stderr
};

inline CliResult run_cli(const std::string& args, const std::string& binary = UATLAB_BIN) {
  FILE* p = popen((binary + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}
