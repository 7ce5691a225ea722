// A fuzz target: one function over arbitrary bytes. libFuzzer drives it in the fuzz build
// (scripts/fuzz.sh); replay.cpp runs it over stored inputs in the normal test suite. A target
// must return normally or throw uatlab::Error: anything else (a crash, a sanitizer report, an
// exception of another type) is a defect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "uatlab/error.hpp"

// Defined by each fuzz_<name>.cpp.
void fuzz_one(const std::string& bytes);

// libFuzzer's entry point (entry.cpp): fuzz_one, with uatlab::Error caught.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
