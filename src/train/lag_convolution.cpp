// DP-free heads' products as convolutions by FFT (lag_convolution.hpp says what and why).
#include "lag_convolution.hpp"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <new>

#include "uatlab/error.hpp"
#include "uatlab/model/architecture.hpp"

namespace uatlab::lag {

namespace {

// A query whose normaliser is below this fraction of Σw is computed directly (the header says why).
constexpr double kDirectBelow = 1e-6;

// The least L ≥ m whose prime factors are 2, 3, 5 and 7 (sizes FFTW transforms fastest).
long fast_size(long m) {
  for (long L = std::max(m, 1L);; ++L) {
    long r = L;
    for (long p : {2, 3, 5, 7})
      while (r % p == 0)
        r /= p;
    if (r == 1) return L;
  }
}

template <class T>
class FftwArray {  // fftw_malloc'd: the alignment every plan below assumes
 public:
  explicit FftwArray(long size)
      : p_(static_cast<T*>(fftw_malloc(sizeof(T) * static_cast<std::size_t>(size)))) {
    if (!p_) throw std::bad_alloc();
  }
  ~FftwArray() { fftw_free(p_); }
  FftwArray(const FftwArray&) = delete;
  FftwArray& operator=(const FftwArray&) = delete;
  T* get() const { return p_; }
  T& operator[](long i) const { return p_[i]; }

 private:
  T* p_;
};

// Real-to-complex and back for one size L, planned once per size under a lock (FFTW's planner is
// not thread-safe; executing a plan on other arrays of the same alignment is) with FFTW_ESTIMATE,
// which picks the same algorithm every time: the same inputs give the same bits.
struct Plans {
  fftw_plan fwd, inv;
};
class PlanCache {
 public:
  ~PlanCache() {
    for (auto& [size, p] : plans_) {
      fftw_destroy_plan(p.fwd);
      fftw_destroy_plan(p.inv);
    }
  }
  Plans get(long L) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = plans_.find(L); it != plans_.end()) return it->second;
    FftwArray<double> x(L);
    FftwArray<fftw_complex> X(L / 2 + 1);
    const int size = static_cast<int>(L);
    const Plans p{fftw_plan_dft_r2c_1d(size, x.get(), X.get(), FFTW_ESTIMATE),
                  fftw_plan_dft_c2r_1d(size, X.get(), x.get(), FFTW_ESTIMATE)};
    if (!p.fwd || !p.inv) throw std::bad_alloc();
    return plans_[L] = p;
  }

 private:
  std::mutex mutex_;
  std::map<long, Plans> plans_;
};

// One head's transforms: a real buffer x of L values and the spectrum of its kernel w.
class Transforms {
 public:
  explicit Transforms(const LagHead& head)
      : L_(head.fft_size), C_(L_ / 2 + 1), plans_(cache().get(L_)), x_(L_), kernel_(C_) {
    for (long i = 0; i < L_; ++i)
      x_[i] = i < static_cast<long>(head.w.size()) ? head.w[static_cast<std::size_t>(i)] : 0.0;
    fftw_execute_dft_r2c(plans_.fwd, x_.get(), kernel_.get());
  }
  long size() const { return L_; }
  long bins() const { return C_; }
  const FftwArray<fftw_complex>& kernel() const { return kernel_; }
  // x = column r of M, zero-padded (scaled by 1/z where given); its spectrum into out.
  void spectrum_of(const Eigen::MatrixXd& M, Eigen::Index r, const FftwArray<fftw_complex>& out,
                   const double* inv_z = nullptr) {
    const long n = M.rows();
    const double* m = M.col(r).data();
    for (long l = 0; l < n; ++l)
      x_[l] = inv_z ? m[l] * inv_z[l] : m[l];
    std::fill(x_.get() + n, x_.get() + L_, 0.0);
    fftw_execute_dft_r2c(plans_.fwd, x_.get(), out.get());
  }
  // x = the inverse transform of in (destroyed), times 1/L.
  const FftwArray<double>& inverse(const FftwArray<fftw_complex>& in) {
    fftw_execute_dft_c2r(plans_.inv, in.get(), x_.get());
    const double scale = 1.0 / static_cast<double>(L_);
    for (long i = 0; i < L_; ++i)
      x_[i] *= scale;
    return x_;
  }
  long wrap(long m) const { return m < 0 ? m + L_ : m; }  // index of lag m in a circular result

 private:
  static PlanCache& cache() {
    static PlanCache c;
    return c;
  }
  long L_, C_;
  Plans plans_;
  FftwArray<double> x_;
  FftwArray<fftw_complex> kernel_;
};

// a ·= b (conj: a ·= conj(b)) for spectra of `bins` entries.
void multiply(const FftwArray<fftw_complex>& a, const FftwArray<fftw_complex>& b, long bins, bool conj) {
  for (long i = 0; i < bins; ++i) {
    const double re = a[i][0], im = a[i][1], bre = b[i][0], bim = conj ? -b[i][1] : b[i][1];
    a[i][0] = re * bre - im * bim;
    a[i][1] = re * bim + im * bre;
  }
}

// Query q's lags: [first, last] (first > last: no key).
std::pair<long, long> lags_of(const LagHead& head, long q) {
  return {std::max(head.lo, q - (head.n - 1)), std::min(head.hi, q)};
}

}  // namespace

LagHead allowed_lags(const LayerSpec& s, long n) {
  LagHead head;
  head.n = n;
  if (n == 0) return head;
  head.lo = 1 - attended_keys(s, 0, n).end;              // query 0's nearest key is at lag −(end − 1)
  head.hi = (n - 1) - attended_keys(s, n - 1, n).first;  // query n − 1's farthest
  if (head.hi < head.lo) return head;
  head.fft_size = fast_size(n + std::max(head.hi, 0L) - std::min(head.lo, 0L));
  if (head.fft_size > std::numeric_limits<int>::max())  // FFTW's sizes are int
    throw Error("DP-free heads: sequences of " + std::to_string(n) + " tokens need transforms of " +
                std::to_string(head.fft_size) + " points, beyond FFTW's int sizes");
  return head;
}

void set_weights(LagHead& head, const Eigen::VectorXd& bias_by_offset) {
  const long n = head.n, lo = head.lo, hi = head.hi, K = std::max(hi - lo + 1, 0L);
  head.w.assign(static_cast<std::size_t>(K), 0.0);
  head.z.assign(static_cast<std::size_t>(n), 0.0);
  head.direct.clear();
  if (K == 0) return;
  auto bias = [&](long lag) { return bias_by_offset(n - 1 - lag); };  // offset l − q = −lag
  double top = -HUGE_VAL;
  for (long lag = lo; lag <= hi; ++lag)
    top = std::max(top, bias(lag));
  std::vector<double> prefix(static_cast<std::size_t>(K) + 1, 0.0);
  for (long j = 0; j < K; ++j) {
    head.w[static_cast<std::size_t>(j)] = std::exp(bias(lo + j) - top);  // NaN if a bias is: the loss says so
    prefix[static_cast<std::size_t>(j) + 1] =
        prefix[static_cast<std::size_t>(j)] + head.w[static_cast<std::size_t>(j)];
  }
  const double total = prefix.back();
  for (long q = 0; q < n; ++q) {
    const auto [first, last] = lags_of(head, q);
    if (first > last) continue;
    double& z = head.z[static_cast<std::size_t>(q)];
    z = prefix[static_cast<std::size_t>(last - lo + 1)] - prefix[static_cast<std::size_t>(first - lo)];
    if (z < kDirectBelow * total) {  // a difference of sums far larger than itself: summed directly
      z = 0;
      for (long lag = first; lag <= last; ++lag)
        z += head.w[static_cast<std::size_t>(lag - lo)];
      head.direct.push_back(q);
    }
  }
}

void forward(const LagHead& head, const Eigen::MatrixXd& V, Eigen::MatrixXd& O) {
  const long n = head.n, R = V.cols();
  O.setZero(n, R);
  if (head.fft_size == 0) return;
  Transforms t(head);
  FftwArray<fftw_complex> X(t.bins());
  for (Eigen::Index r = 0; r < R; ++r) {
    t.spectrum_of(V, r, X);
    multiply(X, t.kernel(), t.bins(), false);
    const FftwArray<double>& c = t.inverse(X);  // c(q − lo) = Σ_lag w(lag)·V(r, q − lag)
    for (long q = 0; q < n; ++q)
      if (const double z = head.z[static_cast<std::size_t>(q)]; z > 0) O(q, r) = c[q - head.lo] / z;
  }
  for (long q : head.direct) {
    const auto [first, last] = lags_of(head, q);
    const double z = head.z[static_cast<std::size_t>(q)];
    for (Eigen::Index r = 0; r < R; ++r) {
      double sum = 0;
      for (long lag = first; lag <= last; ++lag)
        sum += head.w[static_cast<std::size_t>(lag - head.lo)] * V(q - lag, r);
      O(q, r) = sum / z;
    }
  }
}

void backward(const LagHead& head, const Eigen::MatrixXd& V, const Eigen::MatrixXd& dO,
              const Eigen::MatrixXd& O, Eigen::MatrixXd& dV, Eigen::VectorXd& dbias_by_offset) {
  const long n = head.n, R = V.cols(), lo = head.lo, hi = head.hi;
  dV.setZero(n, R);
  dbias_by_offset.setZero(n > 0 ? 2 * n - 1 : 0);
  if (head.fft_size == 0) return;
  // g = dO/z at the queries the transforms serve (the direct ones and those without keys: 0).
  std::vector<double> inv_z(static_cast<std::size_t>(n), 0.0);
  for (long q = 0; q < n; ++q)
    if (const double z = head.z[static_cast<std::size_t>(q)]; z > 0)
      inv_z[static_cast<std::size_t>(q)] = 1 / z;
  std::vector<double> fft_inv_z = inv_z;
  for (long q : head.direct)
    fft_inv_z[static_cast<std::size_t>(q)] = 0;
  Transforms t(head);
  const long bins = t.bins();
  FftwArray<fftw_complex> G(bins), Vs(bins), across(bins);  // across: Σ_r G_r·conj(V_r)
  for (long i = 0; i < bins; ++i)
    across[i][0] = across[i][1] = 0.0;
  for (Eigen::Index r = 0; r < R; ++r) {
    t.spectrum_of(V, r, Vs);
    t.spectrum_of(dO, r, G, fft_inv_z.data());
    for (long i = 0; i < bins; ++i) {  // across += G·conj(Vs)
      across[i][0] += G[i][0] * Vs[i][0] + G[i][1] * Vs[i][1];
      across[i][1] += G[i][1] * Vs[i][0] - G[i][0] * Vs[i][1];
    }
    multiply(G, t.kernel(), bins, true);
    const FftwArray<double>& y = t.inverse(G);  // y(m) = Σ_j w(lo + j)·g(m + j)
    for (long l = 0; l < n; ++l)
      dV(l, r) = y[t.wrap(l + lo)];
  }
  std::vector<double> lagged(static_cast<std::size_t>(hi - lo + 1));  // Σ_r Σ_q g(r, q)·V(r, q − lag)
  {
    const FftwArray<double>& x = t.inverse(across);
    for (long lag = lo; lag <= hi; ++lag)
      lagged[static_cast<std::size_t>(lag - lo)] = x[t.wrap(lag)];
  }
  // Σ_l A(l, q)·dA(l, q) = Σ_r O(r, q)·dO(r, q) =: dot_q; lag `lag`'s share of the queries the
  // transforms serve is w(lag)·Σ dot_q/z_q over those with a key at that lag (prefix sums over q).
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (long q = 0; q < n; ++q)
    prefix[static_cast<std::size_t>(q) + 1] =
        prefix[static_cast<std::size_t>(q)] +
        O.row(q).dot(dO.row(q)) * fft_inv_z[static_cast<std::size_t>(q)];
  for (long lag = lo; lag <= hi; ++lag) {
    const long q0 = std::max(0L, lag), q1 = std::min(n - 1, n - 1 + lag);  // queries with key q − lag
    const double dots = prefix[static_cast<std::size_t>(q1) + 1] - prefix[static_cast<std::size_t>(q0)];
    dbias_by_offset(n - 1 - lag) =
        head.w[static_cast<std::size_t>(lag - lo)] * (lagged[static_cast<std::size_t>(lag - lo)] - dots);
  }
  // The direct queries, entry by entry: A(l, q) = w/z ≤ 1 times dA(l, q) − dot_q, and dO·Aᵀ.
  for (long q : head.direct) {
    const auto [first, last] = lags_of(head, q);
    const double iz = inv_z[static_cast<std::size_t>(q)], dot = O.row(q).dot(dO.row(q));
    for (long lag = first; lag <= last; ++lag) {
      const double a = head.w[static_cast<std::size_t>(lag - lo)] * iz;
      double da = 0;
      for (Eigen::Index r = 0; r < R; ++r) {
        dV(q - lag, r) += a * dO(q, r);
        da += V(q - lag, r) * dO(q, r);
      }
      dbias_by_offset(n - 1 - lag) += a * (da - dot);
    }
  }
}

}  // namespace uatlab::lag
