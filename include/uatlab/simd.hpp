// Which vector instruction set the training's kernels run on. They are compiled for every one
// Highway knows (AVX-512, AVX2, SSE4, SSSE3, NEON and an emulated 128-bit path) and the best the CPU
// has is chosen at run time. UATLAB_SIMD (environment) restricts the choice: avx512, avx2, sse4,
// neon or scalar (the emulated path), so that every path can be tested and timed on one machine.
#pragma once

#include <string>

namespace uatlab::simd {

// Reads UATLAB_SIMD and restricts the choice (once; every kernel calls it). Throws uatlab::Error for
// an unknown name or a path this CPU or build lacks, at every call; the command line, the Python
// module (at import) and train() call it first, so that the error comes before any work (a kernel
// that throws inside a parallel loop would end the process).
void select_path();

// The chosen instruction set as Highway names it (AVX3 is AVX-512), with its vector registers and a
// block's tokens: e.g. "AVX2 (16 vector registers, blocks of 6 tokens)".
std::string path();

}  // namespace uatlab::simd
