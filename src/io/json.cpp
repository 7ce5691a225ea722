#include "uatlab/io/json.hpp"

#include <algorithm>
#include <filesystem>

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "uatlab/limits.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab {

using nlohmann::json;

namespace {

// Builds the DOM from SAX events, rejecting duplicate keys and keeping number text.
class Builder : public nlohmann::json_sax<json> {
 public:
  explicit Builder(bool exact) : exact_(exact) {}
  json root;
  std::string error;

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t& text) override { return exact_ ? put(text) : put(v); }
  bool string(string_t& v) override { return put(v); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error = "duplicate key \"" + k + "\"";
      return false;
    }
    key_ = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    if (e.id == 406) {  // the lexer's own overflow, before the text reaches number_float
      error = "number at byte " + std::to_string(pos) +
              " overflows double: write it as a string (\"1e400\") to keep it exact";
      return false;
    }
    error = "invalid JSON at byte " + std::to_string(pos) + ": " + printable(e.what());
    return false;
  }

  // The parser quotes the bytes it last read, which may be binary: shown as \xNN.
  static std::string printable(const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
      if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      }
    }
    return out;
  }

 private:
  bool exact_;
  std::vector<json*> stack_;  // open containers; only the innermost one grows
  std::vector<std::set<std::string>> keys_;
  std::string key_;

  json* place(json v) {
    if (stack_.empty()) return &(root = std::move(v));
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    return &(top[key_] = std::move(v));
  }
  bool put(json v) { return place(std::move(v)), true; }
  bool open(json v) {
    if (stack_.size() >= static_cast<std::size_t>(limits::kJsonDepth)) {
      error = "nested deeper than " + std::to_string(limits::kJsonDepth) + " levels";
      return false;
    }
    stack_.push_back(place(std::move(v)));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
};

}  // namespace

json parse_json(const std::string& text, const std::string& what, bool exact_numbers) {
  // JSON text holds no NUL byte; the parser would stop at one and ignore what follows.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error(what + ": a NUL byte at offset " + std::to_string(nul) + " (JSON text holds none)");
  Builder b(exact_numbers);
  if (!json::sax_parse(text, &b) || !b.error.empty())
    throw Error(what + ": " + (b.error.empty() ? std::string("invalid JSON") : b.error));
  return b.root;
}

std::string string_field(const json& obj, const std::string& key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

void check_regular_file(const std::string& path, bool for_writing) {
  std::error_code ec;
  const auto st = for_writing ? std::filesystem::symlink_status(path, ec) : std::filesystem::status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found ||
      st.type() == std::filesystem::file_type::regular)
    return;
  throw Error(path + (for_writing ? " exists and is not a regular file" : " is not a regular file") +
              " (a device, FIFO, folder" + (for_writing ? ", or a symbolic link" : "") + "): uatlab " +
              (for_writing ? "writes" : "reads") + " regular files only");
}

void check_outputs(const NamedPaths& inputs, const NamedPaths& outputs) {
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ea, eb;
    const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
    return !ea && !eb && ca == cb;
  };
  // A folder given as input (a GPT-2 checkpoint) is read file by file: an output anywhere in it
  // could replace one of them.
  auto within = [](const std::string& path, const std::string& folder) {
    std::error_code ec, ef, ep;
    if (!std::filesystem::is_directory(folder, ec)) return false;
    const auto f = std::filesystem::weakly_canonical(folder, ef),
               p = std::filesystem::weakly_canonical(path, ep);
    return !ef && !ep && std::mismatch(f.begin(), f.end(), p.begin(), p.end()).first == f.end();
  };
  auto used = [](const std::string& p) { return !p.empty() && p != "-"; };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (!used(path)) continue;
    check_regular_file(path, true);
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    if (!folder.empty() && !std::filesystem::is_directory(folder))  // found now, not after the work
      throw Error(flag + " " + path + ": the folder " + folder.string() + " does not exist");
    // The temporary and the rename need a writable folder (a read-only file system, no permission).
    if (::access(folder.empty() ? "." : folder.c_str(), W_OK | X_OK) != 0)
      throw Error(flag + " " + path + ": the folder " + (folder.empty() ? "." : folder.string()) +
                  " is not writable: " + std::strerror(errno));
    for (const auto& [in_flag, in_path] : inputs) {
      if (used(in_path) && same(path, in_path))
        throw Error(flag + " " + path + " is the input " + in_flag +
                    ": the run would overwrite what it reads");
      if (used(in_path) && within(path, in_path))
        throw Error(flag + " " + path + " is inside the input folder " + in_flag + " " + in_path +
                    ": the run could overwrite a file it reads; write it elsewhere");
    }
    for (std::size_t j = 0; j < i; ++j)
      if (used(outputs[j].second) && same(path, outputs[j].second))
        throw Error(flag + " " + path + " is also " + outputs[j].first +
                    ": one output would overwrite the other");
  }
}

std::string read_file(const std::string& path) {
  check_regular_file(path, false);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("cannot open " + path);
  // One copy: the string sized from the file, then filled (a 500 MB checkpoint is not held twice).
  const std::streamoff size = in.tellg();
  std::string bytes;
  if (size > 0) {
    bytes.resize(static_cast<std::size_t>(size));
    in.seekg(0);
    in.read(bytes.data(), size);
    if (in.gcount() != size) throw Error("cannot read " + path);
  }
  if (in.bad()) throw Error("cannot read " + path);
  return bytes;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  });
}

namespace {
// The temporary a write is filling, for remove_partial_output (a signal handler: a fixed buffer, a
// flag, unlink). One at a time: the CLI writes its outputs one after another.
char partial_path[4096];
volatile std::sig_atomic_t partial_set = 0;

// "cannot write PATH: REASON", the reason from errno where the failing call set it.
Error write_error(const std::string& path) {
  const int e = errno;
  return Error("cannot write " + path + (e ? std::string(": ") + std::strerror(e) : std::string()));
}
}  // namespace

void remove_partial_output() noexcept {
  if (partial_set) ::unlink(partial_path);
}

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  check_regular_file(path, true);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const bool tracked = tmp.size() < sizeof partial_path;
  if (tracked) {
    std::memcpy(partial_path, tmp.c_str(), tmp.size() + 1);
    partial_set = 1;
  }
  auto forget = [&] {
    std::remove(tmp.c_str());
    partial_set = 0;
  };
  try {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw write_error(path);
    write(out);
    if (!out) throw write_error(path);  // errno: the failed write's (a full disk, a size limit)
    out.close();                        // flushes: the last bytes' failure shows here
    if (!out) throw write_error(path);
  } catch (...) {
    forget();
    throw;
  }
  errno = 0;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const Error e = write_error(path);
    forget();
    throw e;
  }
  partial_set = 0;
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the folder " + dir + ": " + ec.message());
}

}  // namespace uatlab
