#include "uatlab/train/trainer.hpp"

#include "uatlab/limits.hpp"
#include "uatlab/simd.hpp"

#include <omp.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>

#include "uatlab/io/model_file.hpp"
#include "uatlab/io/report.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab {

using nlohmann::json;

TrainConfig TrainConfig::from_json(const json& j, const std::string& what) {
  TrainConfig c;
  fields_from_json(j, c, what);
  c.validate();
  return c;
}

double learning_rate(const TrainConfig& c, long t) {
  if (t < c.warmup) return c.lr * static_cast<double>(t + 1) / static_cast<double>(c.warmup);
  const double span = static_cast<double>(std::max(1L, c.steps - c.warmup));
  const double progress = std::min(1.0, static_cast<double>(t - c.warmup) / span);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + std::cos(M_PI * progress));
}

namespace {

bool frozen(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns) {
    if (p == name) return true;
    if (!p.empty() && p.back() == '*' && name.compare(0, p.size() - 1, p, 0, p.size() - 1) == 0) return true;
  }
  return false;
}

// The network's tensors in visiting order, without their names (this runs at every step).
template <class S>
std::vector<Mat<S>*> matrices(Network<S>& n) {
  std::vector<Mat<S>*> v;
  n.for_each_tensor([&](Mat<S>& m) { v.push_back(&m); });
  return v;
}

// Columns of `all` for the sequences `which` (all = every sequence, converted once), into b, whose
// memory is reused: a training step gathers the same sizes every time.
template <class S>
void gather(const Batch<S>& all, const std::vector<std::size_t>& which, Batch<S>& b) {
  Eigen::Index T = 0;
  for (std::size_t i : which)
    T += all.start[i + 1] - all.start[i];
  b.x.resize(all.x.size() ? all.x.rows() : 0, all.x.size() ? T : 0);
  b.target.resize(all.target.size() ? all.target.rows() : 0, all.target.size() ? T : 0);
  b.start.assign(1, 0), b.ids.clear(), b.label.clear(), b.mask.clear();
  Eigen::Index c = 0;
  for (std::size_t i : which) {
    const Eigen::Index c0 = all.start[i], n = all.start[i + 1] - c0;
    // A sequence's columns are one run of memory: copied as such, not column by column.
    std::copy_n(all.x.data() + c0 * all.x.rows(), n * all.x.rows(), b.x.data() + c * b.x.rows());
    std::copy_n(all.target.data() + c0 * all.target.rows(), n * all.target.rows(),
                b.target.data() + c * b.target.rows());
    if (!all.ids.empty()) b.ids.insert(b.ids.end(), all.ids.begin() + c0, all.ids.begin() + c0 + n);
    if (!all.label.empty()) b.label.insert(b.label.end(), all.label.begin() + c0, all.label.begin() + c0 + n);
    b.mask.insert(b.mask.end(), all.mask.begin() + c0, all.mask.begin() + c0 + n);
    c += n;
    b.start.push_back(c);
  }
}
template <class S>
Batch<S> gather(const Batch<S>& all, const std::vector<std::size_t>& which) {
  Batch<S> b;
  gather(all, which, b);
  return b;
}

template <class S>
double accuracy_of(const Trace<S>& t, const Batch<S>& b) {
  long right = 0, counted = 0;
  for (Eigen::Index c = 0; c < b.tokens(); ++c) {
    if (!b.mask[c]) continue;
    Eigen::Index best;
    t.y.col(c).maxCoeff(&best);
    right += best == b.label[c];
    ++counted;
  }
  return counted ? static_cast<double>(right) / static_cast<double>(counted) : 0;
}

// Sequence indices of step t: epoch e = ⌊p/N⌋ of position p = t·B + j is a seeded permutation.
class BatchOrder {
 public:
  BatchOrder(std::size_t n, std::uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<std::size_t> at(long t, int batch) {
    std::vector<std::size_t> out;
    for (int j = 0; j < batch; ++j) {
      const long p = t * batch + j;
      const long e = p / static_cast<long>(n_);
      if (e != epoch_) shuffle(e);
      out.push_back(perm_[p % static_cast<long>(n_)]);
    }
    return out;
  }

 private:
  void shuffle(long e) {
    perm_.resize(n_);
    std::iota(perm_.begin(), perm_.end(), 0);
    Rng rng(seed_ * 1000003ULL + static_cast<std::uint64_t>(e));
    for (std::size_t i = n_; i > 1; --i)
      std::swap(perm_[i - 1], perm_[static_cast<std::size_t>(rng.uniform() * i)]);
    epoch_ = e;
  }
  std::size_t n_;
  std::uint64_t seed_;
  long epoch_ = -1;
  std::vector<std::size_t> perm_;
};

// Threads pay off for the gradient sums and the optimizer's update past this many parameters.
constexpr std::size_t kThreadedParameters = 4096;

// A training step allocates and frees the same buffers at every step: the backward pass's
// temporaries, d×T to m×T numbers per thread. By default glibc hands such blocks back to the
// kernel when they are freed (mmap above 128 KiB, trimming of the threads' heaps), and the next
// step faults every page in again, which cost half the backward pass of the tiny and small
// benchmarks (2026-11-24, docs/benchmarks.md). Once per process, blocks up to 64 MiB come from the
// heap, and the heap is trimmed only past 256 MiB of free memory at its top.
void retain_freed_memory() {
#ifdef __GLIBC__
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
#endif
}

// The threads' gradients are reused while they hold tensors of net's shapes (a gradient is only
// summed tensor by tensor), checked without serialising the architecture at every step.
template <class S>
bool same_shapes(const Network<S>& a, const Network<S>& b) {
  std::vector<Eigen::Index> sa, sb;
  auto shapes = [](std::vector<Eigen::Index>& out) {
    return [&out](const Mat<S>& m) { out.insert(out.end(), {m.rows(), m.cols()}); };
  };
  a.for_each_tensor(shapes(sa));
  b.for_each_tensor(shapes(sb));
  return sa == sb;
}

}  // namespace

template <class S>
double batch_gradient(const Network<S>& net, const Batch<S>& batch, Loss loss, Network<S>& grad,
                      Workspace<S>& ws) {
  retain_freed_memory();
  const int B = batch.sequences();
  // Inside an enclosing parallel region (a sweep runs one training per thread) the team would get
  // one thread, so the batch is not split at all.
  const int P = omp_in_parallel() ? 1 : std::max(1, std::min(omp_get_max_threads(), B));
  if (P == 1) {
    ws.parts.clear(), ws.traces.resize(1);
    ws.traces[0].part_of_batch = false;
    ws.traces[0].normaliser = 0;
    const double t0 = omp_get_wtime();
    const double l = static_cast<double>(forward_train(net, batch, loss, ws.traces[0]));
    const double t1 = omp_get_wtime();
    backward(net, batch, loss, ws.traces[0], grad);
    ws.seconds_forward += t1 - t0, ws.seconds_backward += omp_get_wtime() - t1;
    return l;
  }
  ws.parts.resize(P), ws.traces.resize(P);
  if (static_cast<int>(ws.grads.size()) != P || !same_shapes(ws.grads[0], net))
    ws.grads.assign(P, zero_like(net));
  std::vector<double> losses(P);
  std::vector<Eigen::Index> counts(P);
  std::vector<std::vector<Mat<S>*>> parts_grads(P);
  const auto G = matrices(grad);
  for (int p = 0; p < P; ++p)
    parts_grads[p] = matrices(ws.grads[p]);
  std::exception_ptr error;
  // The tokens in the loss, counted as forward_train counts them: every thread normalises its
  // backward by the whole batch's count without waiting for the others' forward passes.
  const Eigen::Index total =
      std::count_if(batch.mask.begin(), batch.mask.end(), [](char m) { return m != 0; });
  // Past a few thousand parameters the threads sum the parts' gradients, tensor by tensor, after a
  // barrier; below, thread 0 sums them once the region has ended, which saves that barrier (it
  // costs more than the sums: 1.8 µs of a 80 µs step on 2 cores, the tiny benchmark).
  const bool threaded_sum = net.parameter_count() > kThreadedParameters;
  const auto add_parts = [&](std::size_t i) {  // tensor i of every part into grad
    for (int q = 0; q < P; ++q)
      *G[i] += *parts_grads[q][i];
  };
  double t_fwd = 0, t_bwd = 0;  // thread 0's clock after its forward pass, and after the barrier
  const double t0 = omp_get_wtime();
#pragma omp parallel num_threads(P)
  {
    const int p = omp_get_thread_num();
    try {
      std::vector<std::size_t> mine;
      for (int b = p * B / P; b < (p + 1) * B / P; ++b)
        mine.push_back(static_cast<std::size_t>(b));
      gather(batch, mine, ws.parts[p]);
      ws.traces[p].part_of_batch = true;
      losses[p] = static_cast<double>(forward_train(net, ws.parts[p], loss, ws.traces[p]));
      counts[p] = ws.traces[p].counted;
      if (p == 0) t_fwd = omp_get_wtime();
      if (total > 0) {
        ws.traces[p].normaliser = total;
        ws.grads[p].for_each_tensor([](Mat<S>& m) { m.setZero(); });
        backward(net, ws.parts[p], loss, ws.traces[p], ws.grads[p]);
      }
    } catch (...) {
#pragma omp critical
      error = std::current_exception();
    }
    if (threaded_sum) {
#pragma omp barrier
#pragma omp master
      t_bwd = omp_get_wtime();
      if (!error && total > 0) {  // the region's end is the one barrier after the sums
#pragma omp for schedule(dynamic) nowait
        for (long i = 0; i < static_cast<long>(G.size()); ++i)
          add_parts(static_cast<std::size_t>(i));
      }
    }
  }
  if (!threaded_sum) {
    t_bwd = omp_get_wtime();
    if (!error && total > 0)
      for (std::size_t i = 0; i < G.size(); ++i)
        add_parts(i);
  }
  ws.seconds_forward += t_fwd - t0, ws.seconds_backward += t_bwd - t_fwd,
      ws.seconds_reduce += omp_get_wtime() - t_bwd;
  if (error) std::rethrow_exception(error);
  if (total == 0) throw Error("the batch has no tokens counted in the loss (all masked)");
  double sum = 0;
  for (int p = 0; p < P; ++p)
    sum += losses[p] * static_cast<double>(counts[p]);
  return sum / static_cast<double>(total);
}

template <class S>
double AdamW<S>::update(Network<S>& net, Network<S>& grad, const TrainConfig& c, double lr) {
  const auto P = matrices(net), G = matrices(grad), M = matrices(m), V = matrices(v);
  // Per tensor: frozen (left as it is), or an RPE rate p_h kept non-negative when asked. Names and
  // roles are looked at only when an option needs them.
  std::vector<char> skip(P.size(), 0), rates(P.size(), 0);
  if (!c.freeze.empty() || c.nonnegative_rates) {
    std::size_t i = 0;
    net.for_each_tensor([&](const std::string& name, Mat<S>&, Layout, Role r) {
      skip[i] = frozen(c.freeze, name);
      rates[i++] = c.nonnegative_rates && r == Role::rpe_slope;
    });
  }
  double sq = 0;
  for (std::size_t i = 0; i < P.size(); ++i)
    if (!skip[i]) sq += static_cast<double>(G[i]->squaredNorm());
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm))
    throw Error("the gradient became NaN or infinite at step " + std::to_string(step + 1) +
                "; lower the learning rate");
  const S scale = static_cast<S>(c.clip > 0 && norm > c.clip ? c.clip / (norm + 1e-6) : 1.0);
  ++step;
  const S b1 = static_cast<S>(c.beta1), b2 = static_cast<S>(c.beta2);
  const S corr1 = static_cast<S>(1 - std::pow(c.beta1, static_cast<double>(step)));
  const S corr2 = static_cast<S>(1 - std::pow(c.beta2, static_cast<double>(step)));
  const S step_size = static_cast<S>(lr) / corr1, eps = static_cast<S>(c.adam_eps);
  const S decay = static_cast<S>(1 - lr * c.weight_decay);
  auto update = [&](long i) {
    if (skip[static_cast<std::size_t>(i)]) return;
    auto p = P[i]->array();
    auto g = G[i]->array() * scale;
    auto mm = M[i]->array();
    auto vv = V[i]->array();
    p *= decay;
    mm = b1 * mm + (1 - b1) * g;
    vv = b2 * vv + (1 - b2) * g * g;
    p -= step_size * mm / ((vv / corr2).sqrt() + eps);
    if (rates[static_cast<std::size_t>(i)]) p = p.max(S(0));  // projected onto p_h ≥ 0
  };
  // A tiny model's update is shorter than a fork (which an OpenMP `if` clause would still make, for
  // a team of one).
  const long tensors = static_cast<long>(P.size());
  if (net.parameter_count() > kThreadedParameters) {
#pragma omp parallel for schedule(dynamic)
    for (long i = 0; i < tensors; ++i)
      update(i);
  } else {
    for (long i = 0; i < tensors; ++i)
      update(i);
  }
  return norm;
}

// Mean loss and accuracy (−1 for mse) over sequences 0 … count−1, 256 at a time; batch(idx)
// builds the batch of sequences idx.
template <class S, class MakeBatch>
std::pair<double, double> evaluate_in_chunks(const Network<S>& net, std::size_t count, Loss loss,
                                             MakeBatch&& batch) {
  double total = 0, right = 0;
  long counted = 0;
  const std::size_t chunk = 256;
  Trace<S> t;  // one for every chunk: its buffers are reused, not freed and faulted in again
  for (std::size_t s = 0; s < count; s += chunk) {
    std::vector<std::size_t> idx;
    for (std::size_t i = s; i < std::min(count, s + chunk); ++i)
      idx.push_back(i);
    const Batch<S> b = batch(idx);
    total += static_cast<double>(forward_train(net, b, loss, t)) * static_cast<double>(t.counted);
    if (loss == Loss::cross_entropy) right += accuracy_of(t, b) * static_cast<double>(t.counted);
    counted += t.counted;
  }
  return {total / static_cast<double>(counted),
          loss == Loss::cross_entropy ? right / static_cast<double>(counted) : -1.0};
}

template <class S>
std::pair<double, double> evaluate_loss(const Network<S>& net, const Dataset& data, Loss loss) {
  return evaluate_in_chunks(net, data.sequences.size(), loss, [&](const std::vector<std::size_t>& idx) {
    return make_batch<S>(data, idx, loss, net.arch.out_dim());
  });
}

void TrainConfig::validate() const {
  using limits::check_count, limits::check_real;
  check_count(steps, 0, 1LL << 31, "steps");
  check_count(static_cast<long long>(batch), 1, 1 << 20, "batch");
  check_count(warmup, 0, 1LL << 31, "warmup");
  check_count(log_every, 0, 1LL << 31, "log_every");
  check_count(eval_every, 0, 1LL << 31, "eval_every");
  check_count(checkpoint_every, 0, 1LL << 31, "checkpoint_every");
  check_real(lr, 0.0, 1e6, "lr");
  check_real(min_lr, 0.0, 1e6, "min_lr");
  check_real(weight_decay, 0.0, 1e6, "weight_decay");
  check_real(beta1, 0.0, 1 - 1e-12, "beta1");
  check_real(beta2, 0.0, 1 - 1e-12, "beta2");
  check_real(clip, 0.0, 1e300, "clip");
  check_real(adam_eps, 1e-300, 1.0, "adam_eps");
  check_count(plateau_evals, 0, 1LL << 31, "plateau_evals");
  check_real(plateau_tolerance, 0.0, 1.0, "plateau_tolerance");
}

bool validation_plateaued(const std::vector<double>& val_losses, long evals, double tolerance) {
  const auto k = static_cast<std::size_t>(std::max(evals, 0L));
  if (k == 0 || val_losses.size() <= k) return false;
  const auto split = val_losses.end() - static_cast<std::ptrdiff_t>(k);
  const double before = *std::min_element(val_losses.begin(), split);
  const double recent = *std::min_element(split, val_losses.end());
  return !(recent < before - tolerance * std::abs(before));  // a NaN counts as no improvement
}

template <class S>
TrainReport train(Network<S>& net, const Dataset& data, const Dataset* validation, const TrainConfig& config,
                  const std::string& resume, const std::function<void(const Progress&)>& on_log) {
  config.validate();
  simd::select_path();  // an error in UATLAB_SIMD before any work (the kernels run in parallel loops)
  if (data.sequences.empty()) throw Error("no training sequences");
  if (config.plateau_evals > 0 && (config.eval_every == 0 || !validation))
    throw Error(
        "plateau_evals needs eval_every > 0 and a validation set (the plateau is one of the "
        "validation loss)");
  for (const auto& p : config.freeze) {
    bool any = false;
    net.for_each_tensor([&](const std::string& name, const Mat<S>&, Layout) { any |= frozen({p}, name); });
    if (!any) throw Error("--freeze \"" + p + "\" matches no tensor of the network");
  }
  AdamW<S> opt(net);
  if (!resume.empty()) {
    Network<S> loaded;
    auto meta = load_checkpoint<S>(resume, loaded, {{"adam_m.", &opt.m}, {"adam_v.", &opt.v}});
    if (loaded.arch.to_json() != net.arch.to_json())
      throw Error(resume + ": the checkpoint's architecture differs from the network's");
    net = std::move(loaded);
    const std::string step = meta.count("uatlab_step") ? meta.at("uatlab_step") : "";
    if (step.empty() || step.size() > 12 || step.find_first_not_of("0123456789") != std::string::npos)
      throw Error(resume + ": uatlab_step must be a step count, got \"" + step + "\"");
    opt.step = std::stol(step);
    if (opt.step >= config.steps)  // nothing to train: its loss would be a 0 no step measured
      throw Error(resume + ": the checkpoint is at step " + step + ", at or past the " +
                  std::to_string(config.steps) +
                  " steps asked for: nothing left to train (ask for more steps)");
  }
  std::vector<std::size_t> everyone(data.sequences.size());
  std::iota(everyone.begin(), everyone.end(), 0);
  const Batch<S> all = make_batch<S>(data, everyone, config.loss, net.arch.out_dim());
  BatchOrder order(data.sequences.size(), config.seed);
  const bool classify = config.loss == Loss::cross_entropy;

  // The metrics go to PATH.partial (a copy of PATH first when resuming), renamed over PATH when the
  // run ends well: a failed run leaves PATH as it was and its own lines beside it.
  std::ofstream csv;
  const std::string partial = config.metrics + ".partial";
  if (!config.metrics.empty()) {
    const bool append = !resume.empty() && std::ifstream(config.metrics).good();
    std::error_code ec;
    std::error_code absent;  // set where the partial file does not exist
    if (std::filesystem::exists(std::filesystem::symlink_status(partial, absent)))  // not ours to replace
      throw Error("--metrics " + config.metrics + ": " + partial +
                  " exists (a failed run's metrics?): move it away, or choose another --metrics");
    if (append)
      std::filesystem::copy_file(config.metrics, partial, std::filesystem::copy_options::overwrite_existing,
                                 ec);
    csv.open(partial, append ? std::ios::app : std::ios::trunc);
    if (ec || !csv) throw Error("cannot write metrics to " + partial);
    if (!append) csv << "step,lr,loss,accuracy,grad_norm,val_loss,val_accuracy,seconds\n";
  }
  auto save = [&](long step) {
    save_checkpoint<S>(config.checkpoint, net, {{"adam_m.", &opt.m}, {"adam_v.", &opt.v}},
                       {{"uatlab_step", std::to_string(step)}, {"uatlab_train", config.to_json().dump()}});
  };

  // Loss and accuracy over every training sequence, from the data converted once (all).
  auto on_training_set = [&] {
    return evaluate_in_chunks(net, data.sequences.size(), config.loss,
                              [&](const std::vector<std::size_t>& idx) { return gather(all, idx); });
  };
  TrainReport rep;
  std::vector<double> val_losses;  // this run's validations, for the plateau criterion
  const auto t0 = std::chrono::steady_clock::now();
  try {
    Network<S> grad = zero_like(net);
    Workspace<S> ws;
    const long first = opt.step;
    long t = first;
    for (; t < config.steps; ++t) {
      const Batch<S> b = gather(all, order.at(t, config.batch));
      grad.for_each_tensor([](const std::string&, Mat<S>& m, Layout) { m.setZero(); });
      const double loss = batch_gradient(net, b, config.loss, grad, ws);
      if (!std::isfinite(loss) && t == first)  // before any update of this run: the data or the weights
        throw Error("the loss is NaN or infinite at step " + std::to_string(t + 1) +
                    ", before any update: the labels, inputs or weights overflow " +
                    std::string(Scalar<S>::name) + " (scale them, or train in double)");
      if (!std::isfinite(loss))
        throw Error("the loss became NaN or infinite at step " + std::to_string(t + 1) +
                    "; lower the learning rate");
      const double lr = learning_rate(config, t);
      const double gnorm = opt.update(net, grad, config, lr);
      const bool last = t + 1 == config.steps;
      const bool log = last || (config.log_every > 0 && (t + 1) % config.log_every == 0);
      const bool eval = validation && config.eval_every > 0 && ((t + 1) % config.eval_every == 0 || last);
      if (log || eval) {
        rep.loss = loss;
        rep.accuracy = -1;
        if (classify) {
          double right = 0, counted = 0;
          for (std::size_t p = 0; p < ws.traces.size(); ++p) {
            const Batch<S>& part = ws.parts.empty() ? b : ws.parts[p];
            right += accuracy_of(ws.traces[p], part) * static_cast<double>(ws.traces[p].counted);
            counted += static_cast<double>(ws.traces[p].counted);
          }
          rep.accuracy = counted > 0 ? right / counted : 0;
        }
        if (eval) std::tie(rep.val_loss, rep.val_accuracy) = evaluate_loss(net, *validation, config.loss);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (csv.is_open()) {
          csv << (t + 1) << ',' << lr << ',' << loss << ',' << rep.accuracy << ',' << gnorm << ','
              << (eval ? rep.val_loss : -1) << ',' << (eval ? rep.val_accuracy : -1) << ',' << secs << '\n';
          csv.flush();
        }
        if (on_log) {
          const double done = static_cast<double>(t + 1 - first);
          const double rate = done / std::max(secs, 1e-9);
          on_log({t + 1, config.steps, loss, lr, gnorm, rate,
                  static_cast<double>(config.steps - t - 1) / std::max(rate, 1e-9)});
        }
        if (eval) val_losses.push_back(rep.val_loss);
        rep.plateaued =
            eval && validation_plateaued(val_losses, config.plateau_evals, config.plateau_tolerance);
        if (rep.plateaued || (classify && config.stop_at_full_accuracy && on_training_set().second == 1.0)) {
          rep.stopped_early = true;
          ++t;
          break;
        }
      }
      if (!config.checkpoint.empty() && config.checkpoint_every > 0 && (t + 1) % config.checkpoint_every == 0)
        save(t + 1);
    }
    rep.steps = t;
    if (config.evaluate_training_set) std::tie(rep.train_loss, rep.train_accuracy) = on_training_set();
    if (!config.checkpoint.empty()) save(t);
  } catch (const Error& e) {  // other exceptions (Python's KeyboardInterrupt) leave as they are
    if (config.metrics.empty()) throw;
    throw Error(std::string(e.what()) + " (" + config.metrics +
                " is left as it was; this run's metrics are in " + partial + ")");
  }
  if (csv.is_open()) {
    csv.close();  // a line that did not reach the disk (full, a size limit) fails the stream
    if (!csv)
      throw Error("cannot write metrics to " + partial +
                  " (a full disk or a file-size limit?): " + config.metrics + " is left as it was");
    std::error_code ec;
    std::filesystem::rename(partial, config.metrics, ec);
    if (ec) throw Error("cannot write metrics to " + config.metrics + ": " + ec.message());
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

namespace {

// The scored targets of a dataset, per output coordinate (y's rows).
std::vector<std::vector<double>> scored_targets(const Dataset& data) {
  std::vector<std::vector<double>> rows;
  for (const Sequence& q : data.sequences)
    for (Eigen::Index c = 0; c < q.y.cols(); ++c) {
      if (!q.mask.empty() && !q.mask[c]) continue;
      rows.resize(static_cast<std::size_t>(q.y.rows()));
      for (Eigen::Index i = 0; i < q.y.rows(); ++i)
        rows[static_cast<std::size_t>(i)].push_back(Scalar<double>::from(q.y(i, c)));
    }
  return rows;
}

}  // namespace

double chance_loss(const Dataset& data, Loss loss) {
  if (loss == Loss::cross_entropy) {
    std::map<long, double> classes;  // count per label
    double count = 0;
    for (const Sequence& q : data.sequences)
      for (Eigen::Index c = 0; c < q.y.cols(); ++c)
        if (q.mask.empty() || q.mask[c]) {
          classes[class_label(q.y(0, c), std::numeric_limits<int>::max())] += 1;
          count += 1;
        }
    if (count == 0) return std::numeric_limits<double>::quiet_NaN();
    double out = 0;
    for (const auto& [label, k] : classes)
      out -= k / count * std::log(k / count);
    return out;
  }
  const std::vector<std::vector<double>> rows = scored_targets(data);  // mse: the mean of each coordinate
  if (rows.empty() || rows[0].empty()) return std::numeric_limits<double>::quiet_NaN();
  double out = 0;
  for (const std::vector<double>& r : rows)
    out += variance(r, 0);  // the population variance of the scored targets
  return out / static_cast<double>(rows.size());
}

template <class S>
json training_summary(const Network<S>& net, const Dataset& data, const Dataset* validation, Loss loss,
                      const TrainReport& r) {
  json out = {{"parameters", net.parameter_count()},
              {"steps", r.steps},
              {"seconds", r.seconds},
              {"stopped_early", r.stopped_early},
              {"plateaued", r.plateaued}};
  if (r.steps > 0) out["loss"] = r.loss;  // the last step's; no step ran, no such loss
  if (r.accuracy >= 0) out["accuracy"] = r.accuracy;
  const auto [train_loss, train_accuracy] =
      std::isnan(r.train_loss) ? evaluate_loss(net, data, loss) : std::pair{r.train_loss, r.train_accuracy};
  out["train_loss"] = train_loss;
  if (train_accuracy >= 0) out["train_accuracy"] = train_accuracy;
  out["chance_loss"] = chance_loss(data, loss);
  if (!validation) return out;
  const auto [val_loss, val_accuracy] = evaluate_loss(net, *validation, loss);
  out["val_loss"] = val_loss;
  if (val_accuracy >= 0) out["val_accuracy"] = val_accuracy;
  if (loss == Loss::mse) {  // normalised by the variance of the scored targets (pooled)
    std::vector<double> all;
    for (const std::vector<double>& r : scored_targets(*validation))
      all.insert(all.end(), r.begin(), r.end());
    const double var = variance(all, 0);
    if (var > 0) out["val_nmse"] = val_loss / var;  // undefined on constant targets: left out
  }
  return out;
}

template json training_summary<float>(const Network<float>&, const Dataset&, const Dataset*, Loss,
                                      const TrainReport&);
template json training_summary<double>(const Network<double>&, const Dataset&, const Dataset*, Loss,
                                       const TrainReport&);
template double batch_gradient<float>(const Network<float>&, const Batch<float>&, Loss, Network<float>&,
                                      Workspace<float>&);
template double batch_gradient<double>(const Network<double>&, const Batch<double>&, Loss, Network<double>&,
                                       Workspace<double>&);
template struct AdamW<float>;
template struct AdamW<double>;
template TrainReport train<float>(Network<float>&, const Dataset&, const Dataset*, const TrainConfig&,
                                  const std::string&, const std::function<void(const Progress&)>&);
template TrainReport train<double>(Network<double>&, const Dataset&, const Dataset*, const TrainConfig&,
                                   const std::string&, const std::function<void(const Progress&)>&);
template std::pair<double, double> evaluate_loss<float>(const Network<float>&, const Dataset&, Loss);
template std::pair<double, double> evaluate_loss<double>(const Network<double>&, const Dataset&, Loss);

}  // namespace uatlab
