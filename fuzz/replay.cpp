// Runs a fuzz target over stored inputs: every file named on the command line, or in a folder
// named there. The normal test suite replays the seed corpus and every regression file this way.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_target.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> paths;
    if (!fs::exists(argv[i])) continue;  // a target without regression inputs yet
    if (fs::is_directory(argv[i]))
      for (const auto& e : fs::directory_iterator(argv[i]))
        paths.push_back(e.path());
    else
      paths.push_back(argv[i]);
    for (const fs::path& p : paths) {
      std::ifstream in(p, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++files;
    }
  }
  std::cout << "replayed " << files << " inputs\n";
  return files > 0 ? 0 : 1;
}
