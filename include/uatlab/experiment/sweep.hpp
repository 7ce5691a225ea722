// Many independent runs ("cells": a grid of trainings) at once, resumable, on one machine or many.
//
// Cells are JSON objects naming their parameters. run_sweep hands them to the machine's threads,
// one cell per thread at a time (the batch-level OpenMP inside each training then runs on one
// thread, so tiny models keep every core busy instead of waiting at barriers), and appends one
// JSONL line per finished cell to the results file: {"cell": {...}, "result": {...}}. A sweep that
// was killed resumes where it stopped: cells whose line is already in the file are not run again.
// Under `mpirun -n K` (a build with OpenMPI) the ranks take disjoint shards of the pending cells
// and rank 0 alone writes the file, as results arrive.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace uatlab {

struct SweepOptions {
  std::string results;  // JSONL path, appended to; required
  int threads = 0;      // 0: all of OpenMP's threads
  // Called (under a lock) after each cell finishes on this rank: done so far, total pending.
  std::function<void(std::size_t done, std::size_t total, const nlohmann::json& line)> on_result;
};

// Runs the cells not yet in the results file and returns every line of the file in cell order
// (old and new) on the writing rank; other MPI ranks return an empty vector. A line whose cell is
// not in `cells` is kept in the file and left out of the return value.
std::vector<nlohmann::json> run_sweep(const std::vector<nlohmann::json>& cells,
                                      const std::function<nlohmann::json(const nlohmann::json& cell)>& run,
                                      const SweepOptions& options);

// Whether this process writes results (true without MPI, or on rank 0), and the MPI world.
bool sweep_writer();
int sweep_rank();
int sweep_ranks();

}  // namespace uatlab
