#include "uatlab/experiment/sweep.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "uatlab/io/json.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/scalar.hpp"

#ifdef UATLAB_MPI
#include <mpi.h>
#endif

namespace uatlab {

using nlohmann::json;

namespace {

#ifdef UATLAB_MPI
// MPI starts only under a launcher (mpirun sets OMPI_COMM_WORLD_SIZE or PMI_SIZE), so a plain
// `uatlab sweep` never pays for, or depends on, MPI's start-up.
struct Mpi {
  int rank = 0, size = 1;
  bool owned = false;
  Mpi() {
    if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE")) return;
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (provided < MPI_THREAD_SERIALIZED)
        throw Error("the MPI library does not support MPI_THREAD_SERIALIZED");
      owned = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  ~Mpi() {
    if (owned) MPI_Finalize();
  }
};
Mpi& mpi() {
  static Mpi m;
  return m;
}
#endif

// Fields whose meaning a stored result must keep (a hand-edited or corrupted line is refused, not
// averaged into a report): accuracies in [0, 1] (−1: none, for mse), counts non-negative integers.
void check_result(const json& result, const std::string& where) {
  if (!result.is_object()) throw Error(where + ": \"result\" must be an object");
  for (const char* key : {"accuracy", "train_accuracy", "val_accuracy"}) {
    if (!result.contains(key) || result[key].is_null()) continue;
    const json& v = result[key];
    if (!v.is_number() || !((v.get<double>() >= 0 && v.get<double>() <= 1) || v.get<double>() == -1))
      throw Error(where + ": \"" + key + "\" must be an accuracy from 0 to 1, got " +
                  limits::excerpt(v.dump()));
  }
  for (const char* key : {"parameters", "steps"})
    if (result.contains(key) && !result[key].is_number_unsigned())
      throw Error(where + ": \"" + key + "\" must be a count, got " + limits::excerpt(result[key].dump()));
  if (result.contains("seconds") && !(result["seconds"].is_number() && result["seconds"].get<double>() >= 0))
    throw Error(where + ": \"seconds\" must be a time, got " + limits::excerpt(result["seconds"].dump()));
}

// Held by the writing rank for the whole sweep: a second sweep on the same folder would interleave
// its lines with this one's and rewrite the file under it.
class FolderLock {
 public:
  explicit FolderLock(const std::string& results) {
    std::string dir = std::filesystem::path(results).parent_path().string();
    if (dir.empty()) dir = ".";
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot open the folder " + dir + ": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(fd_);
      throw Error(e == EWOULDBLOCK
                      ? "another sweep is running in " + dir + " (" + results + "): wait for it to end"
                      : "cannot lock the folder " + dir + ": " + std::strerror(e));
    }
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock() { ::close(fd_); }

 private:
  int fd_ = -1;
};

// Read the finished lines of a results file. A last line without its newline (the process was
// killed while writing it) is cut off, so that appending continues on a clean line.
std::vector<json> read_results(const std::string& path) {
  std::vector<json> lines;
  if (!std::filesystem::exists(path)) return lines;
  std::string text = read_file(path);
  const std::size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  const bool cut = keep < text.size();
  text.resize(keep);
  std::istringstream rows(text);
  int number = 0;
  for (std::string row; std::getline(rows, row);) {
    ++number;
    if (row.empty()) continue;
    json j = parse_json(row, path + " line " + std::to_string(number));
    if (!j.is_object() || !j.contains("cell") || !j.contains("result"))
      throw Error(path + " line " + std::to_string(number) + ": expected {\"cell\": ..., \"result\": ...}");
    check_result(j["result"], path + " line " + std::to_string(number));
    lines.push_back(std::move(j));
  }
  // Only once every finished line has been read: a file refused above is left as it was.
  if (cut) write_file_atomic(path, text);
  return lines;
}

// Where a finished line goes. The writing process appends it to the results file (FileSink); under
// MPI it also takes the lines the other ranks send (CollectingSink), and they send theirs
// (ForwardingSink). put() runs under the sweep's lock; finish() after this rank's cells.
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  virtual void put(std::size_t at, const json& line, const std::string& text) = 0;
  virtual void finish() {}
};

class FileSink : public ResultSink {
 public:
  FileSink(const std::string& path, std::vector<json>& found)
      : file_(std::fopen(path.c_str(), "ab")), path_(path), found_(found) {
    if (!file_) throw Error("cannot append to " + path);
  }
  ~FileSink() override { std::fclose(file_); }
  void put(std::size_t at, const json& line, const std::string& text) override {
    const std::string row = text + "\n";
    if (std::fwrite(row.data(), 1, row.size(), file_) != row.size() || std::fflush(file_) != 0)
      throw Error("cannot append to " + path_);
    found_[at] = line;
  }

 private:
  std::FILE* file_;
  std::string path_;
  std::vector<json>& found_;
};

#ifdef UATLAB_MPI
enum Tag { result_tag = 1, done_tag = 2 };

// Rank 0 of several: its own lines and every other rank's go to the file.
class CollectingSink : public FileSink {
 public:
  CollectingSink(const std::string& path, std::vector<json>& found,
                 const std::map<std::string, std::size_t>& index, int ranks)
      : FileSink(path, found), index_(index), ranks_(ranks) {}
  void put(std::size_t at, const json& line, const std::string& text) override {
    FileSink::put(at, line, text);
    receive(false);
  }
  void finish() override {
    while (finished_ < ranks_ - 1)
      receive(true);
  }

 private:
  void receive(bool block) {  // take what other ranks sent (wait for one message when blocking)
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (block) {
        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        flag = 1;
      } else {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      }
      if (!flag) return;
      int len = 0;
      MPI_Get_count(&st, MPI_CHAR, &len);
      std::string text(static_cast<std::size_t>(len), '\0');
      MPI_Recv(text.data(), len, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (st.MPI_TAG == done_tag) {
        ++finished_;
      } else {
        const json line = parse_json(text, "a sweep result from rank " + std::to_string(st.MPI_SOURCE));
        FileSink::put(index_.at(line.at("cell").dump()), line, text);
      }
      if (block) return;
    }
  }
  const std::map<std::string, std::size_t>& index_;
  int ranks_, finished_ = 0;
};

// Any other rank: each line goes to rank 0, then a last empty message says this rank is done.
class ForwardingSink : public ResultSink {
 public:
  void put(std::size_t, const json&, const std::string& text) override {
    MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, 0, result_tag, MPI_COMM_WORLD);
  }
  void finish() override { MPI_Send(nullptr, 0, MPI_CHAR, 0, done_tag, MPI_COMM_WORLD); }
};
#endif

std::unique_ptr<ResultSink> make_sink(const std::string& path, std::vector<json>& found,
                                      const std::map<std::string, std::size_t>& index, int rank, int ranks) {
#ifdef UATLAB_MPI
  if (ranks > 1) {
    if (rank == 0) return std::make_unique<CollectingSink>(path, found, index, ranks);
    return std::make_unique<ForwardingSink>();
  }
#else
  (void)index;
  (void)rank;
  (void)ranks;
#endif
  return std::make_unique<FileSink>(path, found);
}

}  // namespace

bool sweep_writer() {
  return sweep_rank() == 0;
}
#ifdef UATLAB_MPI
int sweep_rank() {
  return mpi().rank;
}
int sweep_ranks() {
  return mpi().size;
}
#else
int sweep_rank() {
  return 0;
}
int sweep_ranks() {
  return 1;
}
#endif

namespace {

// Every rank learns whether any rank failed here, so that all of them leave together instead of
// waiting in a collective for a rank that has gone (rank 0 alone refusing a malformed runs.jsonl
// hung the job). Throws the local failure, or names the other rank's.
void all_ranks_agree(const std::string& failure) {
#ifdef UATLAB_MPI
  if (sweep_ranks() > 1) {
    int failed = !failure.empty(), any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && failure.empty()) throw Error("sweep stopped: another rank failed (its message is above)");
  }
#endif
  if (!failure.empty()) throw Error(failure);
}

}  // namespace

std::vector<json> run_sweep(const std::vector<json>& cells, const std::function<json(const json&)>& run,
                            const SweepOptions& o) {
  if (o.results.empty()) throw Error("a sweep needs a results file");
  std::map<std::string, std::size_t> index;  // cell text -> position
  for (std::size_t i = 0; i < cells.size(); ++i)
    if (!index.emplace(cells[i].dump(), i).second)
      throw Error("the sweep lists the cell " + cells[i].dump() + " twice");
  const int rank = sweep_rank(), ranks = sweep_ranks();

  // Rank 0 reads the file and decides what is pending; the other ranks learn it from rank 0.
  std::vector<json> found(cells.size());
  std::vector<int> pending;
  std::string failure;
  std::optional<FolderLock> lock;
  if (rank == 0) try {
      lock.emplace(o.results);
      for (json& line : read_results(o.results)) {
        auto it = index.find(line.at("cell").dump());
        if (it == index.end()) continue;
        if (!found[it->second].is_null() && found[it->second] != line)  // which one would a report take?
          throw Error(o.results + ": two different results for the cell " + limits::excerpt(it->first));
        found[it->second] = std::move(line);
      }
      for (std::size_t i = 0; i < cells.size(); ++i)
        if (found[i].is_null()) pending.push_back(static_cast<int>(i));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  all_ranks_agree(failure);
#ifdef UATLAB_MPI
  if (ranks > 1) {
    int count = static_cast<int>(pending.size());
    MPI_Bcast(&count, 1, MPI_INT, 0, MPI_COMM_WORLD);
    pending.resize(count);
    MPI_Bcast(pending.data(), count, MPI_INT, 0, MPI_COMM_WORLD);
  }
#endif
  std::vector<int> mine;
  for (std::size_t k = 0; k < pending.size(); ++k)
    if (static_cast<int>(k % ranks) == rank) mine.push_back(pending[k]);

  std::unique_ptr<ResultSink> sink;
  try {
    sink = make_sink(o.results, found, index, rank, ranks);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  all_ranks_agree(failure);
  std::size_t done = 0;
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  auto one = [&](std::size_t k) {
    bool stop;
#pragma omp critical(uatlab_sweep)
    stop = !failure.empty();
    if (stop) return;
    const std::size_t at = static_cast<std::size_t>(mine[k]);
    const json& cell = cells[at];
    json line;
    try {
      line = {{"cell", cell}, {"result", run(cell)}};
    } catch (const std::exception& e) {
#pragma omp critical(uatlab_sweep)
      if (failure.empty()) failure = "cell " + cell.dump() + ": " + e.what();
      return;
    }
    const std::string text = line.dump();
#pragma omp critical(uatlab_sweep)
    {
      try {
        sink->put(at, line, text);
        ++done;
        if (o.on_result) o.on_result(done, mine.size(), line);
      } catch (const std::exception& e) {
        if (failure.empty()) failure = e.what();
      }
    }
  };
  // One cell at a time runs outside any parallel region: inside a team of one thread, every
  // parallel loop of the cell would start a nested team whose threads end with it (libgomp), each
  // time, losing the MPFR caches those threads built (LeakSanitizer found it).
  if (threads > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (std::size_t k = 0; k < mine.size(); ++k)
      one(k);
  } else {
    for (std::size_t k = 0; k < mine.size(); ++k)
      one(k);
  }
  sink->finish();
  all_ranks_agree(failure.empty()
                      ? failure
                      : "sweep stopped: " + failure + " (finished cells are kept in " + o.results + ")");
  if (rank != 0) return {};
  return found;
}

}  // namespace uatlab
