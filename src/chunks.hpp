// Parallel work that can be stopped between chunks (a private header of the library).
#pragma once

#include <omp.h>

#include <algorithm>
#include <exception>

namespace uatlab {

// body(i) for every i in [0, n), in parallel, in chunks of a few items per thread; after each chunk,
// outside the parallel loop, more(done) reports (a reporter may throw there: Python's Ctrl-C does,
// where no exception may leave a loop) and says whether to go on. body must not throw.
template <class Body, class More>
void in_parallel_chunks(long n, const Body& body, const More& more) {
  const long chunk = 4L * std::max(1, omp_get_max_threads());
  for (long c0 = 0; c0 < n; c0 += chunk) {
    const long c1 = std::min(n, c0 + chunk);
#pragma omp parallel for schedule(dynamic)
    for (long i = c0; i < c1; ++i)
      body(i);
    if (!more(c1)) return;
  }
}

// body(i) for every i in [0, n), in parallel (dynamic chunks of `chunk`). An exception thrown inside
// a parallel region would end the process: each is caught, and the one of the lowest i is rethrown
// after the loop (the same one at any thread count).
template <class Body>
void parallel_for(long n, const Body& body, int chunk = 1) {
  std::exception_ptr first;
  long first_at = n;
#pragma omp parallel for schedule(dynamic, chunk)
  for (long i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
#pragma omp critical(uatlab_parallel_for)
      if (i < first_at) first_at = i, first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace uatlab
