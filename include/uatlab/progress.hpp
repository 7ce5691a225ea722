// Long work (certification, constructions, evaluation of many sequences) says how far it is
// through an OnProgress: the stage, units done, units in all (0 when unknown). It is called from
// one thread at a time, often; the caller decides what to show (the CLI prints to stderr at most
// once a second, nothing with --quiet). An empty function reports nothing.
#pragma once

#include <functional>
#include <string>

namespace uatlab {

using OnProgress = std::function<void(const std::string& stage, long long done, long long total)>;

inline void report(const OnProgress& progress, const std::string& stage, long long done, long long total) {
  if (progress) progress(stage, done, total);
}

}  // namespace uatlab
