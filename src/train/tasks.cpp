#include "uatlab/train/tasks.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab {

namespace {

// The largest lag, after checking that there is one, every lag is >= 1 and n exceeds them all.
int check_lags(const TaskOptions& o, const std::string& task) {
  if (o.lags.empty()) throw Error(task + " needs at least one lag");
  for (int l : o.lags)
    if (l < 1) throw Error("lags must be >= 1");
  const int TM = *std::max_element(o.lags.begin(), o.lags.end());
  if (o.n <= TM)
    throw Error("sequence length n = " + std::to_string(o.n) + " must exceed the largest lag " +
                std::to_string(TM));
  return TM;
}

Dataset sparse_boolean(const TaskOptions& o) {
  const int M = static_cast<int>(o.lags.size()), TM = check_lags(o, "sparse-boolean");
  Rng rng(o.seed);
  std::vector<int> table(static_cast<std::size_t>(1) << M);
  for (auto& v : table)
    v = rng.uniform() < 0.5;
  auto f = [&](const std::vector<int>& bits) {
    int ones = 0, code = 0;
    for (int i = 0; i < M; ++i) {
      ones += bits[i];
      code |= bits[i] << i;
    }
    if (o.boolean == "parity") return ones % 2;
    if (o.boolean == "majority") return 2 * ones > M ? 1 : 0;
    if (o.boolean == "and") return ones == M ? 1 : 0;
    if (o.boolean == "product") return (M - ones) % 2 == 0 ? 1 : 0;  // Π (2b − 1) = +1
    if (o.boolean == "table") return table[code];
    throw Error("boolean function \"" + o.boolean + "\": expected parity, majority, and, product or table");
  };
  Dataset ds;
  ds.token_input = true;
  ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    Sequence s;
    for (int t = 0; t < o.n; ++t)
      s.tokens.push_back(rng.uniform() < 0.5);
    s.y = Mat<Rational>::Zero(1, o.n);
    s.mask.assign(o.n, 0);
    for (int t = TM; t < o.n; ++t) {
      std::vector<int> bits;
      for (int l : o.lags)
        bits.push_back(s.tokens[t - l]);
      s.y(0, t) = f(bits);
      s.mask[t] = 1;
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

Dataset complex_readout(const TaskOptions& o) {
  const int TM = check_lags(o, "complex-readout");
  Rng rng(o.seed);
  if (o.d < 1) throw Error("complex-readout needs d >= 1");
  Dataset ds;
  ds.d = o.d;
  ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    std::vector<double> x(o.n);
    for (auto& v : x)
      v = rng.uniform(-1, 1);
    Sequence s;
    s.x = Mat<Rational>::Zero(o.d, o.n);  // the value in row 0; rows 1..d-1 give the residual stream room
    s.y = Mat<Rational>::Zero(1, o.n);
    s.mask.assign(o.n, 0);
    for (int t = 0; t < o.n; ++t) {
      s.x(0, t) = rational_of(x[t]);
      if (t < TM) continue;
      double y = 1;
      for (int l : o.lags)
        y *= std::sin(o.omega * 3.14159265358979323846 * x[t - l]);
      s.y(0, t) = rational_of(y);
      s.mask[t] = 1;
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

// Mahdavi et al.'s memorization task: Gaussian tokens, a random class on the first token.
Dataset random_labels(const TaskOptions& o) {
  if (o.d < 1 || o.classes < 2) throw Error("random-labels needs d >= 1 and at least 2 classes");
  Rng rng(o.seed);
  Dataset ds;
  ds.d = o.d;
  ds.label_dim = 1;
  const double scale = 1 / std::sqrt(static_cast<double>(o.d));
  for (int i = 0; i < o.N; ++i) {
    Sequence s;
    s.x = Mat<Rational>(o.d, o.n);
    for (int t = 0; t < o.n; ++t)
      for (int r = 0; r < o.d; ++r)
        set_rational(s.x(r, t), rng.gauss() * scale);
    s.y = Mat<Rational>::Zero(1, o.n);
    s.y(0, 0) = std::min(o.classes - 1, static_cast<int>(rng.uniform() * o.classes));
    s.mask.assign(o.n, 0);
    s.mask[0] = 1;
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

// Associative recall, a task that needs long-range, content-based token mixing: n − 1 pair tokens
// (key k, value v), id k·C + v, with n − 1 distinct keys out of V and values out of C = o.classes,
// then a query token, id V·C + k, for the key of one of the pairs; the label at the query (the last
// token, the only one scored) is that pair's value. The pair sits anywhere before the query and is
// found by its key alone, so a mixer must select tokens by content over the whole sequence.
Dataset recall(const TaskOptions& o) {
  if (o.n < 2 || o.classes < 2 || o.V < o.n - 1)
    throw Error("recall needs n >= 2, at least 2 classes (values) and V >= n - 1 keys, got n = " +
                std::to_string(o.n) + ", classes = " + std::to_string(o.classes) +
                ", V = " + std::to_string(o.V));
  limits::check_count(limits::saturating_mul(o.V, o.classes + 1), 1, limits::kSize,
                      "recall vocabulary V * (classes + 1)");
  Rng rng(o.seed);
  auto below = [&](int m) { return static_cast<int>(rng.next() % static_cast<std::uint64_t>(m)); };
  Dataset ds;
  ds.token_input = true;
  ds.label_dim = 1;
  const int P = o.n - 1;  // pairs
  std::vector<int> keys;
  std::unordered_set<int> drawn;
  for (int i = 0; i < o.N; ++i) {
    // P distinct keys out of V (Floyd's sampling: memory for P, not V), then in random order.
    keys.clear(), drawn.clear();
    for (int j = o.V - P; j < o.V; ++j) {
      const int t = below(j + 1), key = drawn.count(t) ? j : t;
      drawn.insert(key), keys.push_back(key);
    }
    for (int t = P - 1; t > 0; --t)
      std::swap(keys[t], keys[below(t + 1)]);
    Sequence s;
    std::vector<int> values;
    for (int t = 0; t < P; ++t) {
      values.push_back(below(o.classes));
      s.tokens.push_back(keys[t] * o.classes + values.back());
    }
    const int asked = below(P);
    s.tokens.push_back(o.V * o.classes + keys[asked]);
    s.y = Mat<Rational>::Zero(1, o.n);
    s.y(0, o.n - 1) = values[asked];
    s.mask.assign(o.n, 0);
    s.mask[o.n - 1] = 1;
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

// Token 2c + b: payload bit b, code c indexing the lag table o.lags.
Dataset adaptive(const TaskOptions& o, bool nested) {
  check_lags(o, nested ? "adaptive-2" : "adaptive-1");
  const int C = static_cast<int>(o.lags.size());
  Rng rng(o.seed);
  Dataset ds;
  ds.token_input = true;
  ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    Sequence s;
    std::vector<int> b(o.n), c(o.n);
    for (int t = 0; t < o.n; ++t) {
      b[t] = rng.uniform() < 0.5;
      c[t] = std::min(C - 1, static_cast<int>(rng.uniform() * C));
      s.tokens.push_back(2 * c[t] + b[t]);
    }
    s.y = Mat<Rational>::Zero(1, o.n);
    s.mask.assign(o.n, 0);
    for (int t = 0; t < o.n; ++t) {
      const int t1 = o.lags[c[t]];
      if (t - t1 < 0) continue;
      int y = b[t - t1];
      if (nested) {
        const int t2 = t1 + o.lags[c[t - t1]];
        if (t - t2 < 0) continue;
        y ^= b[t - t2];
      }
      s.y(0, t) = y;
      s.mask[t] = 1;
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

// A corpus is read once per process (tasks may be made from several threads).
const std::string& corpus_text(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it == cache.end()) {
    if (path.empty()) throw Error("the chars task needs a corpus (--task-corpus FILE)");
    std::string text = read_file(path);
    if (text.size() < 1000)
      throw Error("corpus " + path + " has " + std::to_string(text.size()) +
                  " bytes; the chars task needs at least 1000");
    it = cache.emplace(path, std::move(text)).first;
  }
  return it->second;
}

Dataset chars(const TaskOptions& o) {
  const std::string& text = corpus_text(o.corpus);
  const std::string alphabet = corpus_alphabet(text);
  int id[256];
  for (std::size_t k = 0; k < alphabet.size(); ++k)
    id[static_cast<unsigned char>(alphabet[k])] = static_cast<int>(k);
  const std::size_t split = text.size() * 9 / 10;
  const std::size_t begin = o.validation ? split : 0, end = o.validation ? text.size() : split;
  if (end - begin < static_cast<std::size_t>(o.n) + 1)
    throw Error("the corpus split has " + std::to_string(end - begin) +
                " characters, fewer than n + 1 = " + std::to_string(o.n + 1));
  Rng rng(o.seed);
  Dataset ds;
  ds.token_input = true;
  ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    const std::size_t start =
        begin + static_cast<std::size_t>(rng.uniform() * static_cast<double>(end - begin - o.n));
    Sequence s;
    s.y = Mat<Rational>(1, o.n);
    for (int t = 0; t < o.n; ++t) {
      s.tokens.push_back(id[static_cast<unsigned char>(text[start + t])]);
      s.y(0, t) = id[static_cast<unsigned char>(text[start + t + 1])];
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

enum class Tail { heavy, light, tempered, lags };

// The memory kernel ρ(s), s = 1 … n, of one tail, each summing to 1 over s ≥ 1: a power law, an
// exponential, a power law cut off at the length λ (inside neither RPE class), and a sparse memory
// (weight 1/M at each of the M lags).
template <Tail tail>
std::vector<double> kernel_weights(const TaskOptions& o) {
  std::vector<double> rho(o.n + 1, 0.0);
  if constexpr (tail == Tail::lags) {
    check_lags(o, "kernel-lags");
    for (int l : o.lags)
      rho[l] += 1.0 / static_cast<double>(o.lags.size());
    return rho;
  }
  if (!(o.beta > 0) || !std::isfinite(o.beta)) throw Error("kernel tasks need a finite beta > 0");
  if (tail == Tail::tempered && (!(o.cutoff > 0) || !std::isfinite(o.cutoff)))
    throw Error("kernel-tempered needs a finite cutoff > 0");
  if (tail == Tail::light) {
    for (int s = 1; s <= o.n; ++s)
      rho[s] = (1 - std::exp(-o.beta)) * std::exp(-o.beta * (s - 1));
    return rho;
  }
  // s^{−(1+β)} e^{−s/λ}, λ = ∞ for the pure power law; normalised by its sum over k ≥ 1, the terms
  // from K = 200,000 on by the integral bound e^{−K/λ} K^{−β}/β.
  const double lambda = tail == Tail::heavy ? HUGE_VAL : o.cutoff;
  auto f = [&](double s) { return std::pow(s, -(1 + o.beta)) * std::exp(-s / lambda); };
  const int K = 200000;
  double z = 0;
  for (int k = 1; k < K; ++k)
    z += f(k);
  z += std::exp(-K / lambda) * std::pow(double(K), -o.beta) / o.beta;
  for (int s = 1; s <= o.n; ++s)
    rho[s] = f(s) / z;
  return rho;
}

template <Tail tail>
Dataset kernel(const TaskOptions& o) {
  if (o.d < 1) throw Error("kernel tasks need d >= 1");
  const std::vector<double> rho = kernel_weights<tail>(o);
  Rng rng(o.seed);
  Dataset ds;
  ds.d = o.d;
  ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    std::vector<double> x(o.n);
    for (auto& v : x)
      v = rng.gauss();
    Sequence s;
    s.x = Mat<Rational>::Zero(o.d, o.n);  // the value in row 0, as in complex-readout
    s.y = Mat<Rational>(1, o.n);
    s.mask.assign(o.n, 1);
    for (int t = 0; t < o.n; ++t) {
      s.x(0, t) = rational_of(x[t]);
      double y = 0;
      for (int k = 1; k <= (o.window > 0 ? std::min(t, o.window) : t); ++k)
        y += rho[k] * x[t - k];
      s.y(0, t) = rational_of(y);
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

TaskShape kernel_shape(const TaskOptions& o) {
  return TaskShape{0, o.d, 1};
}

int alphabet_size(const TaskOptions& o) {
  return static_cast<int>(corpus_alphabet(corpus_text(o.corpus)).size());
}

}  // namespace

// |V| distinct random tokens of R^d, norms in [1, 2], entries exact multiples of 1/1000 (pairwise
// checks: V is kept small).
static std::vector<Vec<Rational>> demo_vocabulary(int V, int d, Rng& rng) {
  std::vector<Vec<Rational>> vocab;
  while (static_cast<int>(vocab.size()) < V) {
    Vec<double> g(d);
    for (int i = 0; i < d; ++i)
      g(i) = rng.gauss();
    g *= rng.uniform(1, 2) / g.norm();
    Vec<Rational> x =
        g.unaryExpr([](double t) { return Rational(static_cast<long>(std::llround(t * 1000)), 1000); });
    bool fresh = x.squaredNorm() != 0;
    for (auto& y : vocab)
      fresh = fresh && y != x;
    if (fresh) vocab.push_back(x);
  }
  return vocab;
}

Dataset labelled_dataset(int N, int n, int d, int V, int L, bool per_token, std::uint64_t seed) {
  limits::check_count(N, 1, 1 << 22, "labelled data: N");
  limits::check_count(n, 1, 1 << 12, "labelled data: n");
  limits::check_count(d, 1, 1 << 10, "labelled data: d");
  limits::check_count(V, 1, 1 << 12, "labelled data: |V|");
  limits::check_count(L, 1, 1 << 20, "labelled data: labels");
  limits::check_count(static_cast<long long>(N) * n * d, 1, limits::kSize, "labelled data: N * n * d");
  if (static_cast<double>(n) * std::log(static_cast<double>(V)) < std::log(static_cast<double>(N)) + 1)
    throw Error("labelled data: " + std::to_string(N) + " distinct sequences need more than |V|^n = " +
                std::to_string(V) + "^" + std::to_string(n) + " (with room to draw them)");
  Rng rng(seed);
  const std::vector<Vec<Rational>> vocab = demo_vocabulary(V, d, rng);
  Dataset ds;
  ds.d = d, ds.label_dim = 1, ds.sequence_labels = !per_token;
  std::set<std::vector<int>> seen;
  while (static_cast<int>(ds.sequences.size()) < N) {
    std::vector<int> ids(static_cast<std::size_t>(n));
    for (int& t : ids)
      t = static_cast<int>(rng.uniform() * V);
    if (!seen.insert(ids).second) continue;
    Sequence s;
    s.x = Mat<Rational>(d, n);
    s.y = Mat<Rational>::Zero(1, n);
    for (int k = 0; k < n; ++k) {
      s.x.col(k) = vocab[static_cast<std::size_t>(ids[static_cast<std::size_t>(k)])];
      if (per_token || k == n - 1) s.y(0, k) = static_cast<long>(rng.uniform() * L);
    }
    if (!per_token) {
      const Vec<Rational> label = s.y.col(n - 1);  // drawn above, in the same order as per token
      label_last_token(s, label);
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

// The one registry of tasks: name, loss, generator and shapes side by side.
Dataset demo_dataset(int N, int n, int d, int V, std::uint64_t seed) {
  // The vocabulary is drawn until |V| distinct vectors (pairwise checks): V is kept small.
  limits::check_count(N, 1, 1 << 20, "demo data: N");
  limits::check_count(d, 1, 1 << 10, "demo data: d");
  limits::check_count(V, 1, 1 << 12, "demo data: |V|");
  limits::check_count(n, 1, V, "demo data: n (distinct tokens from |V|)");
  limits::check_count(static_cast<long long>(N) * n * d, 1, limits::kSize, "demo data: N * n * d");
  Rng rng(seed);
  const std::vector<Vec<Rational>> vocab = demo_vocabulary(V, d, rng);
  Dataset ds;
  ds.d = d;
  ds.label_dim = 1;
  for (int i = 0; i < N; ++i) {
    std::vector<int> idx(V);
    for (int j = 0; j < V; ++j)
      idx[j] = j;
    for (int j = 0; j < n; ++j)
      std::swap(idx[j], idx[j + static_cast<int>(rng.uniform() * (V - j))]);
    idx.resize(n);
    std::vector<int> set = idx;
    std::sort(set.begin(), set.end());
    std::uint64_t h = seed * 0x9E3779B97F4A7C15ULL;
    for (int t : set)
      h = (h ^ static_cast<std::uint64_t>(t + 1)) * 0x100000001B3ULL;
    Sequence s;
    s.x = Mat<Rational>(d, n);
    s.y = Mat<Rational>(1, n);
    for (int k = 0; k < n; ++k) {
      s.x.col(k) = vocab[idx[k]];
      Rng lab(h ^ static_cast<std::uint64_t>(idx[k] * 7919 + 1));
      s.y(0, k) = static_cast<long>(lab.next() % 3);  // three classes, a function of (token, set)
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

const std::vector<TaskSpec>& tasks() {
  using O = const TaskOptions&;
  static const std::vector<TaskSpec> table = {
      {"memorize", Loss::cross_entropy, [](O o) { return demo_dataset(o.N, o.n, o.d, o.V, o.seed); },
       [](O o) {
         return TaskShape{0, o.d, 3};
       }},
      {"random-labels", Loss::cross_entropy, random_labels,
       [](O o) {
         return TaskShape{0, o.d, o.classes};
       }},
      {"recall", Loss::cross_entropy, recall,
       [](O o) {
         // (clamped: make_task refuses a vocabulary past the limit before anything is built)
         const long long vocab = std::min(limits::saturating_mul(o.V, o.classes + 1), limits::kSize);
         return TaskShape{static_cast<int>(vocab), 0, o.classes};
       }},
      {"sparse-boolean", Loss::cross_entropy, sparse_boolean,
       [](O) {
         return TaskShape{2, 0, 2};
       }},
      {"complex-readout", Loss::mse, complex_readout,
       [](O o) {
         return TaskShape{0, o.d, 1};
       }},
      {"adaptive-1", Loss::cross_entropy, [](O o) { return adaptive(o, false); },
       [](O o) {
         return TaskShape{2 * static_cast<int>(o.lags.size()), 0, 2};
       }},
      {"adaptive-2", Loss::cross_entropy, [](O o) { return adaptive(o, true); },
       [](O o) {
         return TaskShape{2 * static_cast<int>(o.lags.size()), 0, 2};
       }},
      {"kernel-heavy", Loss::mse, kernel<Tail::heavy>, kernel_shape, kernel_weights<Tail::heavy>},
      {"kernel-light", Loss::mse, kernel<Tail::light>, kernel_shape, kernel_weights<Tail::light>},
      {"kernel-tempered", Loss::mse, kernel<Tail::tempered>, kernel_shape, kernel_weights<Tail::tempered>},
      {"kernel-lags", Loss::mse, kernel<Tail::lags>, kernel_shape, kernel_weights<Tail::lags>},
      {"chars", Loss::cross_entropy, chars,
       [](O o) {
         return TaskShape{alphabet_size(o), 0, alphabet_size(o)};
       }},
  };
  return table;
}

std::vector<double> memory_kernel(const std::string& name, const TaskOptions& o) {
  const TaskSpec& t = task(name);
  if (!t.kernel) throw Error("task \"" + name + "\" has no memory kernel");
  return t.kernel(o);
}

std::string task_names() {
  std::vector<std::string> names;
  for (const TaskSpec& t : tasks())
    names.push_back(t.name);
  return join_list(names);
}

const TaskSpec& task(const std::string& name) {
  for (const TaskSpec& t : tasks())
    if (name == t.name) return t;
  throw Error("unknown task \"" + name + "\" (" + task_names() + ")");
}

Dataset make_task(const std::string& name, const TaskOptions& o) {
  const TaskSpec& t = task(name);
  if (o.N < 1 || o.n < 1) throw Error("tasks need N >= 1 and n >= 1");
  // Sized before anything is drawn (random-labels with N = 10^8 and n = 10^5 ran out of memory).
  limits::check_count(limits::saturating_mul(limits::saturating_mul(o.N, o.n), std::max(o.d, 1)), 1,
                      limits::kSize, "task size N * n * d");
  // The real options are read by some tasks only, and checked for all (--task-omega inf gave a
  // "non-finite number" error from deep inside the generator).
  limits::check_real(o.omega, -1e6, 1e6, "task option omega");
  limits::check_real(o.beta, -1e6, 1e6, "task option beta");
  limits::check_real(o.cutoff, -1e12, 1e12, "task option cutoff");
  Dataset ds = t.generate(o);
  if (o.mask_before > 0)
    for (Sequence& s : ds.sequences) {
      if (s.mask.empty()) s.mask.assign(s.n(), 1);
      for (std::size_t k = 0; k < s.mask.size() && k < static_cast<std::size_t>(o.mask_before); ++k)
        s.mask[k] = 0;
    }
  return ds;
}

TaskOptions validation_options(const TaskOptions& o, int N) {
  TaskOptions v = o;
  v.N = N;
  v.validation = true;
  v.seed = o.seed + 1000003;
  return v;
}

std::string corpus_alphabet(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char ch : text)
    seen[ch] = true;
  std::string a;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) a += static_cast<char>(c);
  return a;
}

}  // namespace uatlab
