// JSON parsing that keeps what nlohmann's default parser loses.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace uatlab {

// Parse JSON text. Duplicate keys in an object are an error (the default parser keeps the last).
// With exact_numbers, floating-point literals become strings holding their exact text ("0.1"
// stays 1/10, "1e-400" does not underflow); integers stay integers. `what` names the source in
// errors ("dataset line 3", "safetensors header").
nlohmann::json parse_json(const std::string& text, const std::string& what, bool exact_numbers = false);

// obj[key] when obj is an object holding a string there, else "" (never throws: for checks like
// "format" == "uatlab-model-1" on untrusted input).
std::string string_field(const nlohmann::json& obj, const std::string& key);

// Read a whole file; throws Error naming the path.
std::string read_file(const std::string& path);

// Create a folder and its parents (no error if it exists); throws Error naming it.
void make_dirs(const std::string& dir);

// Write a file atomically: a temporary beside it, renamed into place. On any failure nothing is
// left at `path` (a previous file there is kept); the error says why (errno's reason).
void write_file_atomic(const std::string& path, const std::string& content);
// The same, with the content written by `write` into the stream of the temporary file (a file
// too large to hold twice in memory, streamed piece by piece); an exception from write leaves no
// file behind and path as it was.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);
// Removes the temporary file a write_file_atomic in progress is filling; async-signal-safe, for a
// program's handler of SIGINT/SIGTERM (the CLI's), so that a stopped write leaves nothing behind.
void remove_partial_output() noexcept;
// Throws Error unless `path` is absent or a regular file: uatlab reads and writes regular files
// only (a device, FIFO, folder or symbolic link is never read to the end nor replaced).
void check_regular_file(const std::string& path, bool for_writing);
// Before any work: every output (flag, path) is absent or a regular file, and none is the same
// file as an input or as another output (by any name). Empty paths and "-" (stdout) are skipped.
using NamedPaths = std::vector<std::pair<std::string, std::string>>;
void check_outputs(const NamedPaths& inputs, const NamedPaths& outputs);

}  // namespace uatlab
