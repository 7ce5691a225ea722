// The SIMD kernels (kernels.hpp) in Highway's operations. Highway's foreach_target.h includes this
// file once per instruction set, each time with HWY_NAMESPACE naming it and the compiler told to
// use it; HWY_EXPORT gathers the copies into a table and HWY_DYNAMIC_DISPATCH calls the best the CPU
// has. Nothing here includes Eigen (see the header).
//
// The blocked products: rows of w (or of g) in blocks of two vector registers, against a few tokens
// (or columns of g) at a time, so that most registers hold the sums while a column of w (or a token
// of a) and the broadcast numbers stream past. Eigen's GEMM first copies both operands into its own
// layout, which at these sizes costs as much as the product (figures: docs/benchmarks.md). Then one
// attention head's fixed-size products and the softmax.
// A copy of this file's code exists per instruction set; SVE is left out: its vectors have no size
// at compile time and cannot be held in arrays.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#include <algorithm>
#include <cstdint>
#include <limits>

#define HWY_COMPILE_ALL_ATTAINABLE  // every instruction set, whatever the build's baseline
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/kernels.cpp"  // src/ is on this file's include path
#include <hwy/foreach_target.h>                // includes this file again for every instruction set
#include <hwy/highway.h>
// After highway.h, once per instruction set:
#include <hwy/contrib/math/math-inl.h>

#include "kernels.hpp"

// The kernels of kernels.hpp: its name, its options' type and the function that serves it on one
// instruction set. The one table from which the per-instruction-set entries and the dispatching
// functions are made (a kernel cannot be exported without its dispatch, or the other way round).
#ifndef UATLAB_SIMD_KERNELS
#define UATLAB_SIMD_KERNELS(X)             \
  X(product, Product, product_any)         \
  X(outer, Outer, outer_any)               \
  X(head_gram, Head, head_any<true>)       \
  X(head_times, Head, head_any<false>)     \
  X(softmax_columns, Softmax, softmax_any) \
  X(softmax_backward_columns, SoftmaxBackward, softmax_backward_any)
#endif

HWY_BEFORE_NAMESPACE();
namespace uatlab::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How many tokens a block takes depends on how many vector registers hold its sums: 32 with
// AVX-512 and on AArch64, 16 with AVX2 and SSE.
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM_A64
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif
// A whole block (two registers a token): eight tokens are 16 sums of the 32 registers. Of 16, they
// left none for w's column and the broadcast number, and GCC reloaded sums from the stack: six
// tokens (12 sums) ran y = w·x at 1.4-1.6× the speed of eight (16×128 to 512×128 over 1,024 tokens,
// one core of a family-23 AMD EPYC with AVX2: 78-86 GFLOP/s against 56-58).
constexpr int kWhole = kRegisters >= 32 ? 8 : 6;
// A half block (one register a token): eight with 32 registers (sixteen tokens ran at 0.70× of
// eight: their sixteen offsets into x took more integer registers than there are, and GCC kept them
// in vector registers, moved back for every column); with 16, twelve ran at 1.2-1.3× of eight.
constexpr int kHalf = kRegisters >= 32 ? 8 : 12;
// The heads' X·Mᵀ (Outer::heads) has g's columns consecutive in b, one pointer for all: sixteen of
// them in a half block with 32 registers.
constexpr int kHeadsHalf = kRegisters >= 32 ? 16 : 12;

template <class S>
using Tag = hn::ScalableTag<S>;
template <class S>
using V = hn::Vec<Tag<S>>;

// ---- weights of half a register's rows, their columns in pairs (paired_rows) ----

// A token's sums of a weight with R = L/2 rows (8 floats with AVX-512) fill half a register, so the
// kernels above would run at half the machine's width. Here W's columns go in pairs: lane 2r + e of
// register i holds W(r, 2i + e) and is multiplied by the token's entry 2i + e (the two entries
// broadcast at once, as one 64-bit number), so that each multiply-add serves two columns; at the
// end the two lanes of each row are added. Each lane sums its products in order, each multiply-add
// rounded once; a row's sum is then (even columns) + (odd columns), which rounds differently from
// the in-order sum of the other kernels (docs/training.md). Float only.
#if HWY_TARGET != HWY_SCALAR
// x[0], x[1] in every pair of lanes.
HWY_INLINE V<float> pair_at(const float* x) {
  const hn::Repartition<uint64_t, Tag<float>> d64;
  uint64_t bits;
  hwy::CopyBytes<8>(x, &bits);
  return hn::BitCast(Tag<float>(), hn::Set(d64, bits));
}

// Tokens j and, when two, j + 1 of y from their lanes' sums a and b: the rows' two lanes added, then
// the bias (bias2: in both halves), the epilogue, or y's old numbers when p.add.
template <Epilogue E>
void paired_store(const Product<float>& p, V<float> a, V<float> b, V<float> bias2, Index j, bool two) {
  const Tag<float> d;
  const hn::Half<Tag<float>> h;
  const V<float> sums = hn::Add(hn::Add(hn::ConcatEven(d, b, a), hn::ConcatOdd(d, b, a)), bias2);
  for (int e = 0; e < (two ? 2 : 1); ++e) {
    float* y = p.y + (j + e) * p.y_stride;
    auto v = e == 0 ? hn::LowerHalf(h, sums) : hn::UpperHalf(h, sums);
    if constexpr (E == Epilogue::relu) {
      v = hn::Max(v, hn::Zero(h));
    } else if constexpr (E == Epilogue::gate) {
      v = hn::IfThenElseZero(hn::Lt(hn::Zero(h), hn::LoadU(h, p.gate + (j + e) * p.y_stride)), v);
    } else if (p.add) {
      v = hn::Add(hn::LoadU(h, y), v);
    }
    hn::StoreU(v, h, y);
  }
}

// The P tokens from j on (P even, or 1), w the paired columns (a register per pair). The tokens'
// K numbers are consecutive (x's stride is K, known here): every number a multiply-add needs lies at
// a constant offset from one pointer (sixteen tokens at a run-time stride took sixteen integer
// registers, and GCC moved them through vector registers for every pair of columns).
template <int K, int P, Epilogue E>
HWY_INLINE void paired_tokens(const Product<float>& p, const V<float>* w, V<float> bias2, Index j) {
  const Tag<float> d;
  const float* x = p.x.data + j * K;
  // The sums start from the first multiply-add onto a zero register (an array of zeros first made
  // GCC clear it on the stack at every call).
  V<float> acc[P];
  for (int t = 0; t < P; ++t)
    acc[t] = hn::MulAdd(w[0], pair_at(x + t * K), hn::Zero(d));
  for (int i = 1; i < K / 2; ++i)
    for (int t = 0; t < P; ++t)
      acc[t] = hn::MulAdd(w[i], pair_at(x + t * K + 2 * i), acc[t]);
  if constexpr (P == 1)
    paired_store<E>(p, acc[0], acc[0], bias2, j, false);
  else
    for (int t = 0; t < P; t += 2)
      paired_store<E>(p, acc[t], acc[t + 1], bias2, j + t, true);
}

// Sixteen tokens at a time (sixteen independent sums: eight left the multiply-adds waiting on each
// other's latency), then two, then one.
template <int K, Epilogue E>
void paired_product(const Product<float>& p) {
  const Tag<float> d;
  const hn::Half<Tag<float>> h;
  const Index L = hn::Lanes(d), R = L / 2;
  HWY_ALIGN float lanes[K / 2 * HWY_MAX_BYTES / sizeof(float)];
  V<float> w[K / 2];
  for (int i = 0; i < K / 2; ++i) {
    for (Index r = 0; r < R; ++r)
      for (int e = 0; e < 2; ++e)
        lanes[i * L + 2 * r + e] = p.w.data[(2 * i + e) * p.w.stride + r];
    w[i] = hn::Load(d, lanes + i * L);
  }
  const auto bias = p.bias ? hn::LoadU(h, p.bias) : hn::Zero(h);
  const V<float> bias2 = hn::Combine(d, bias, bias);
  Index j = 0;
  for (; j + 16 <= p.tokens; j += 16)
    paired_tokens<K, 16, E>(p, w, bias2, j);
  for (; j + 2 <= p.tokens; j += 2)
    paired_tokens<K, 2, E>(p, w, bias2, j);
  if (j < p.tokens) paired_tokens<K, 1, E>(p, w, bias2, j);
}
template <Epilogue E>
void paired_product_cols(const Product<float>& p) {
  switch (p.cols) {
    case 2:
      return paired_product<2, E>(p);
    case 4:
      return paired_product<4, E>(p);
    case 8:
      return paired_product<8, E>(p);
    case 16:
      return paired_product<16, E>(p);
    case 32:
      return paired_product<32, E>(p);
  }
}

// g's columns (P pairs) += scale · Σ_j a_j b_jᵀ and a_sum += Σ_j a_j: lane 2r + e of register p sums
// a_j(r)·b_j(2p + e), a_j with each entry twice (one permute per j), b_j's entries 2p and 2p + 1
// broadcast as one 64-bit number; then lanes permuted so that column 2p is the lower half.
template <int P>
void paired_outer(const Outer<float>& o) {
  const Tag<float> d;
  const hn::Half<Tag<float>> h;
  const Index L = hn::Lanes(d), R = L / 2;
  HWY_ALIGN int32_t twice_lanes[HWY_MAX_BYTES / sizeof(float)], split_lanes[HWY_MAX_BYTES / sizeof(float)];
  for (Index i = 0; i < L; ++i)
    twice_lanes[i] = int32_t(i / 2), split_lanes[i] = int32_t(i < R ? 2 * i : 2 * (i - R) + 1);
  const auto twice = hn::SetTableIndices(d, twice_lanes);
  const auto split = hn::SetTableIndices(d, split_lanes);
  V<float> acc[P];
  for (int q = 0; q < P; ++q)
    acc[q] = hn::Zero(d);
  auto sum = hn::Zero(h);
  for (Index j = 0; j < o.tokens; ++j) {
    const auto aj = hn::LoadU(h, o.a.data + j * o.a.stride);
    if (o.a_sum) sum = hn::Add(sum, aj);
    const V<float> a2 = hn::TableLookupLanes(hn::ZeroExtendVector(d, aj), twice);
    const float* bj = o.b.data + j * o.b.stride;
    for (int q = 0; q < P; ++q)
      acc[q] = hn::MulAdd(a2, pair_at(bj + 2 * q), acc[q]);
  }
  const auto scale = hn::Set(h, o.scale);
  for (int q = 0; q < P; ++q) {
    const V<float> columns = hn::TableLookupLanes(acc[q], split);
    for (int e = 0; e < 2; ++e) {
      float* out = o.g + (2 * q + e) * o.g_stride;
      const auto v = e == 0 ? hn::LowerHalf(h, columns) : hn::UpperHalf(h, columns);
      hn::StoreU(hn::MulAdd(v, scale, hn::LoadU(h, out)), h, out);
    }
  }
  if (o.a_sum) hn::StoreU(hn::Add(hn::LoadU(h, o.a_sum), sum), h, o.a_sum);
}
// A quarter of a register's rows (4 floats with AVX-512: d = 4): W's columns in fours, lane 4r + e of
// register i holding W(r, 4i + e), the token's entries 4i … 4i + 3 broadcast to every 128-bit block;
// at the end the four lanes of each row are added, ((e = 0) + (e = 1)) + ((e = 2) + (e = 3)), for
// four tokens at once, whose sums then fill one register in y's order (y's tokens consecutive).
template <int K, int P, Epilogue E>
HWY_INLINE void quad_tokens(const Product<float>& p, const V<float>* w, V<float> bias4, Index j) {
  const Tag<float> d;
  const float* x = p.x.data + j * K;
  V<float> acc[P];
  for (int t = 0; t < P; ++t)
    acc[t] = hn::MulAdd(w[0], hn::LoadDup128(d, x + t * K), hn::Zero(d));
  for (int i = 1; i < K / 4; ++i)
    for (int t = 0; t < P; ++t)
      acc[t] = hn::MulAdd(w[i], hn::LoadDup128(d, x + t * K + 4 * i), acc[t]);
  for (int t = 0; t < P; t += 4) {
    const V<float> s1 = hn::Add(hn::ConcatEven(d, acc[t + 1], acc[t]), hn::ConcatOdd(d, acc[t + 1], acc[t]));
    const V<float> s2 =
        hn::Add(hn::ConcatEven(d, acc[t + 3], acc[t + 2]), hn::ConcatOdd(d, acc[t + 3], acc[t + 2]));
    V<float> v = hn::Add(hn::Add(hn::ConcatEven(d, s2, s1), hn::ConcatOdd(d, s2, s1)), bias4);
    float* y = p.y + (j + t) * p.y_stride;
    if constexpr (E == Epilogue::relu) {
      v = hn::Max(v, hn::Zero(d));
    } else if constexpr (E == Epilogue::gate) {
      v = hn::IfThenElseZero(hn::Lt(hn::Zero(d), hn::LoadU(d, p.gate + (j + t) * p.y_stride)), v);
    } else if (p.add) {
      v = hn::Add(hn::LoadU(d, y), v);
    }
    hn::StoreU(v, d, y);
  }
}

// Sixteen tokens at a time, then four; the last one to three through a buffer of four (x padded
// with zeros; y and the gate copied in and the sums copied out), so that no load or store passes
// the operands' ends.
template <int K, Epilogue E>
void quad_product(const Product<float>& p) {
  const Tag<float> d;
  const Index L = hn::Lanes(d), R = L / 4;
  constexpr Index kMax = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float lanes[K / 4 * kMax], bias[kMax];
  V<float> w[K / 4];
  for (int i = 0; i < K / 4; ++i) {
    for (Index r = 0; r < R; ++r)
      for (int e = 0; e < 4; ++e)
        lanes[i * L + 4 * r + e] = p.w.data[(4 * i + e) * p.w.stride + r];
    w[i] = hn::Load(d, lanes + i * L);
  }
  for (Index i = 0; i < L; ++i)
    bias[i] = p.bias ? p.bias[i % R] : 0.0f;
  const V<float> bias4 = hn::Load(d, bias);
  Index j = 0;
  for (; j + 16 <= p.tokens; j += 16)
    quad_tokens<K, 16, E>(p, w, bias4, j);
  for (; j + 4 <= p.tokens; j += 4)
    quad_tokens<K, 4, E>(p, w, bias4, j);
  const Index rest = p.tokens - j;
  if (rest > 0) {
    HWY_ALIGN float x[4 * K] = {}, y[kMax] = {}, gate[kMax] = {};
    for (Index i = 0; i < rest * K; ++i)
      x[i] = p.x.data[j * K + i];
    for (Index i = 0; i < rest * R; ++i) {
      y[i] = p.y[j * R + i];
      if (p.gate) gate[i] = p.gate[j * R + i];
    }
    Product<float> q = p;
    q.x.data = x, q.y = y, q.gate = gate, q.tokens = 4;
    quad_tokens<K, 4, E>(q, w, bias4, 0);
    for (Index i = 0; i < rest * R; ++i)
      p.y[j * R + i] = y[i];
  }
}
template <Epilogue E>
void quad_product_cols(const Product<float>& p) {
  switch (p.cols) {
    case 4:
      return quad_product<4, E>(p);
    case 8:
      return quad_product<8, E>(p);
    case 16:
      return quad_product<16, E>(p);
    case 32:
      return quad_product<32, E>(p);
  }
}

// R when product() takes an R×cols float weight in fours here (at least 4 floats a register), else 0.
Index quad_rows_here(Index cols) {
  const Index L = Index(hn::Lanes(Tag<float>()));
  return L >= 4 && quad_cols(cols) ? L / 4 : 0;
}
#endif

// R when product() and outer() take an R×cols float weight in pairs here, else 0.
Index paired_rows_here(Index cols) {
#if HWY_TARGET == HWY_SCALAR
  (void)cols;
  return 0;
#else
  return paired_cols(cols) ? Index(hn::Lanes(Tag<float>())) / 2 : 0;
#endif
}

// The paired kernels for these shapes (true), else false.
bool paired_any(const Outer<float>& o) {
#if HWY_TARGET != HWY_SCALAR
  if (o.rows == paired_rows_here(o.cols)) {
    switch (o.cols) {
      case 2:
        return paired_outer<1>(o), true;
      case 4:
        return paired_outer<2>(o), true;
      case 8:
        return paired_outer<4>(o), true;
      case 16:
        return paired_outer<8>(o), true;
      case 32:
        return paired_outer<16>(o), true;
    }
  }
#endif
  (void)o;
  return false;
}
bool paired_any(const Outer<double>&) {
  return false;
}

// ---- the blocked products (Product, Outer) ----

// Rows [begin, end) of y, in blocks of NV registers, for the P tokens from j on. `keep` rows at the
// block's start (a last half block that overlaps the one before: RowBlocks) keep their numbers.
// K > 0: w has K columns and x's tokens are consecutive (x.stride = K), both known here, so that the
// loop over the columns unrolls and every broadcast is at a constant offset from x.
template <int NV, int P, Epilogue E, int K, class S>
void product_block(const Product<S>& p, Index begin, Index end, Index keep, Index j) {
  const Tag<S> d;
  const Index L = hn::Lanes(d), cols = K > 0 ? K : p.cols, stride = K > 0 ? K : p.x.stride;
  const S* x = p.x.data + j * stride;
  S* y = p.y + j * p.y_stride;
  for (Index r0 = begin; r0 < end; r0 += NV * L) {
    V<S> acc[P][NV];
    for (int v = 0; v < NV; ++v) {
      const V<S> bias = p.bias ? hn::LoadU(d, p.bias + r0 + v * L) : hn::Zero(d);
      for (int t = 0; t < P; ++t)
        acc[t][v] = bias;
    }
    for (Index c = 0; c < cols; ++c) {
      const S* wc = p.w.data + c * p.w.stride + r0;
      V<S> w[NV];
      for (int v = 0; v < NV; ++v)
        w[v] = hn::LoadU(d, wc + v * L);
      for (int t = 0; t < P; ++t) {
        const V<S> xt = hn::Set(d, x[t * stride + c]);
        for (int v = 0; v < NV; ++v)
          acc[t][v] = hn::MulAdd(w[v], xt, acc[t][v]);
      }
    }
    for (int t = 0; t < P; ++t)
      for (int v = 0; v < NV; ++v) {
        S* out = y + t * p.y_stride + r0 + v * L;
        V<S> sums = acc[t][v];
        if constexpr (E == Epilogue::relu) {
          sums = hn::Max(sums, hn::Zero(d));
        } else if constexpr (E == Epilogue::gate) {
          const S* gate = p.gate + j * p.y_stride + t * p.y_stride + r0 + v * L;
          sums = hn::IfThenElseZero(hn::Lt(hn::Zero(d), hn::LoadU(d, gate)), sums);
        } else if (p.add) {
          sums = hn::Add(hn::LoadU(d, out), sums);
        }
        if (keep > 0) sums = hn::IfThenElse(hn::FirstN(d, keep), hn::LoadU(d, out), sums);
        hn::StoreU(sums, d, out);
      }
  }
}

// Rows [begin, end) for every token, W at a time, then in pairs, then a last one alone: a single
// token's sums are each one chain of multiply-adds that wait on each other's latency.
template <int NV, int W, Epilogue E, int K, class S>
void product_rows(const Product<S>& p, Index begin, Index end, Index keep) {
  Index j = 0;
  for (; j + W <= p.tokens; j += W)
    product_block<NV, W, E, K>(p, begin, end, keep, j);
  if constexpr (W > 2)
    for (; j + 2 <= p.tokens; j += 2)
      product_block<NV, 2, E, K>(p, begin, end, keep, j);
  if (j < p.tokens) product_block<NV, 1, E, K>(p, begin, end, keep, j);
}

// The rows of a weight with r ≥ L rows (L numbers a register): whole blocks from row 0, then a half
// block, and where fewer than L rows are left, one more half block that ends at row r. It overlaps
// the one before by `keep` rows, which it computes again but leaves as they were (a weight of 62
// floats with AVX-512 goes 32 + 16 + 16 rows, the last from row 46, keeping 14).
struct RowBlocks {
  Index whole_end, half_begin, half_end, last_begin, keep;
  RowBlocks(Index r, Index L) {
    whole_end = r - r % (2 * L);
    half_begin = whole_end;
    half_end = r - whole_end >= L ? whole_end + L : whole_end;
    last_begin = half_end < r ? r - L : r;
    keep = half_end < r ? L - (r - half_end) : 0;
  }
};

template <Epilogue E, int K, class S>
void product_columns(const Product<S>& p) {
  const RowBlocks b(p.rows, Index(hn::Lanes(Tag<S>())));
  if (b.whole_end > 0) product_rows<2, kWhole, E, K>(p, 0, b.whole_end, 0);
  if (b.half_end > b.half_begin) product_rows<1, kHalf, E, K>(p, b.half_begin, b.half_end, 0);
  if (b.last_begin < p.rows) product_rows<1, kHalf, E, K>(p, b.last_begin, p.rows, b.keep);
}

// Float weights with consecutive tokens: of a quarter or half a register's rows, their columns in
// fours or pairs; of unrolled_cols columns, the column count known here; else the blocked kernels.
template <Epilogue E, class S>
void product_epilogue(const Product<S>& p) {
  if constexpr (hwy::IsSame<S, float>())
    if (p.x.stride == p.cols) {
#if HWY_TARGET != HWY_SCALAR
      if (p.rows == quad_rows_here(p.cols) && p.y_stride == p.rows) return quad_product_cols<E>(p);
      if (p.rows == paired_rows_here(p.cols)) return paired_product_cols<E>(p);
#endif
      switch (p.cols) {
        case 4:
          return product_columns<E, 4>(p);
        case 8:
          return product_columns<E, 8>(p);
        case 16:
          return product_columns<E, 16>(p);
      }
    }
  product_columns<E, 0>(p);
}

template <class S>
void product_any(const Product<S>& p) {
  switch (p.epilogue) {
    case Epilogue::none:
      return product_epilogue<Epilogue::none>(p);
    case Epilogue::relu:
      return product_epilogue<Epilogue::relu>(p);
    case Epilogue::gate:
      return product_epilogue<Epilogue::gate>(p);
  }
}

// g's P columns from c0 on, rows [begin, end) in blocks of NV registers, += scale · the sums over
// the tokens [j0, j1); and, when Sum, a_sum += the sum of a's columns (two more additions a token
// against P·NV multiply-adds, where a separate pass read all of a again).
template <int NV, int P, bool Sum, class S>
void outer_block(const Outer<S>& o, Index begin, Index end, Index keep, Index c0, Index j0, Index j1) {
  const Tag<S> d;
  const Index L = hn::Lanes(d);
  const V<S> scale = hn::Set(d, o.scale);
  for (Index r0 = begin; r0 < end; r0 += NV * L) {
    V<S> acc[P][NV], sum[NV];
    for (int v = 0; v < NV; ++v) {
      sum[v] = hn::Zero(d);
      for (int t = 0; t < P; ++t)
        acc[t][v] = hn::Zero(d);
    }
    for (Index j = j0; j < j1; ++j) {
      const S* aj = o.a.data + j * o.a.stride + r0;
      V<S> a[NV];
      for (int v = 0; v < NV; ++v)
        a[v] = hn::LoadU(d, aj + v * L);
      for (int t = 0; t < P; ++t) {
        const V<S> bt = hn::Set(d, o.b.data[j * o.b.stride + c0 + t]);
        for (int v = 0; v < NV; ++v)
          acc[t][v] = hn::MulAdd(a[v], bt, acc[t][v]);
      }
      if constexpr (Sum)
        for (int v = 0; v < NV; ++v)
          sum[v] = hn::Add(sum[v], a[v]);
    }
    const auto kept = hn::FirstN(d, size_t(keep));
    for (int v = 0; v < NV; ++v) {
      for (int t = 0; t < P; ++t) {
        S* out = o.g + (c0 + t) * o.g_stride + r0 + v * L;
        const V<S> old = hn::LoadU(d, out);
        hn::StoreU(hn::IfThenElse(kept, old, hn::MulAdd(acc[t][v], scale, old)), d, out);
      }
      if constexpr (Sum) {
        S* out = o.a_sum + r0 + v * L;
        const V<S> old = hn::LoadU(d, out);
        hn::StoreU(hn::IfThenElse(kept, old, hn::Add(old, sum[v])), d, out);
      }
    }
  }
}

// g's P columns from c0 on, with a_sum when they are the first.
template <int NV, int P, class S>
void outer_group(const Outer<S>& o, Index begin, Index end, Index keep, Index c0, Index j0, Index j1) {
  if (c0 == 0 && o.a_sum)
    outer_block<NV, P, true>(o, begin, end, keep, c0, j0, j1);
  else
    outer_block<NV, P, false>(o, begin, end, keep, c0, j0, j1);
}

// g's columns W at a time, then in pairs, then alone.
template <int NV, int W, class S>
void outer_columns(const Outer<S>& o, Index begin, Index end, Index keep, Index j0, Index j1) {
  Index c = 0;
  for (; c + W <= o.cols; c += W)
    outer_group<NV, W>(o, begin, end, keep, c, j0, j1);
  if constexpr (W > 2)
    for (; c + 2 <= o.cols; c += 2)
      outer_group<NV, 2>(o, begin, end, keep, c, j0, j1);
  if (c < o.cols) outer_group<NV, 1>(o, begin, end, keep, c, j0, j1);
}

// Rows [begin, end) of one half block (a register), columns as wide as the heads allow.
template <class S>
void outer_half(const Outer<S>& o, Index begin, Index end, Index keep, Index j0, Index j1) {
  if (begin >= end) return;
  if (o.heads && kHeadsHalf != kHalf)
    outer_columns<1, kHeadsHalf>(o, begin, end, keep, j0, j1);
  else
    outer_columns<1, kHalf>(o, begin, end, keep, j0, j1);
}

template <class S>
void outer_any(const Outer<S>& o) {
  if (paired_any(o)) return;
  const RowBlocks b(o.rows, Index(hn::Lanes(Tag<S>())));
  const Index chunk = o.chunk > 0 ? o.chunk : o.tokens;
  for (Index j0 = 0; j0 < o.tokens; j0 += chunk) {
    const Index j1 = j0 + chunk < o.tokens ? j0 + chunk : o.tokens;
    if (b.whole_end > 0) outer_columns<2, kWhole>(o, 0, b.whole_end, 0, j0, j1);
    outer_half(o, b.half_begin, b.half_end, 0, j0, j1);
    outer_half(o, b.last_begin, o.rows, b.keep, j0, j1);
  }
}

// ---- one attention head's products (Head) ----

// Columns of A = scale · Xᵀ·Y, J at a time, each N numbers in C registers (vectors of at most N
// lanes): J·C independent chains of R multiply-adds. Row r of X, copied once into xt (R·N numbers
// against R·N² multiply-adds), is column r of Xᵀ.
template <int R, int N, class S>
void gram(const Head<S>& h) {
  const hn::CappedTag<S, N> d;
  constexpr int L = int(hn::MaxLanes(hn::CappedTag<S, N>())), C = N / L;
  constexpr int J = std::min(N, std::max(1, kRegisters / 2 / C));
  S xt[R * N];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < N; ++k)
      xt[r * N + k] = h.x.data[r + k * h.x.stride];
  const auto scale = hn::Set(d, h.scale);
  for (int j0 = 0; j0 < N; j0 += J) {
    hn::Vec<decltype(d)> acc[J][C];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) {
        const auto y = hn::Set(d, h.y.data[(j0 + j) * h.y.stride + r]);
        for (int c = 0; c < C; ++c) {
          const auto xr = hn::LoadU(d, xt + r * N + c * L);
          acc[j][c] = r == 0 ? hn::Mul(xr, y) : hn::MulAdd(xr, y, acc[j][c]);
        }
      }
    for (int j = 0; j < J; ++j)
      for (int c = 0; c < C; ++c)
        hn::StoreU(hn::Mul(acc[j][c], scale), d, h.out + (j0 + j) * h.out_stride + c * L);
  }
}

// Columns of G (+)= scale · X·M (or X·Mᵀ), J at a time, each R numbers in C registers, while the
// columns of X stream past. M(i, j0 + j) is m[(j0 + j)·N + i], Mᵀ's m[i·N + j0 + j]: the J numbers
// an i needs lie at constant offsets from one pointer (J addresses made GCC reload some from the
// stack for every i).
template <int R, int N, bool Transposed, class S>
void times(const Head<S>& h) {
  const hn::CappedTag<S, R> d;
  constexpr int L = int(hn::MaxLanes(hn::CappedTag<S, R>())), C = R / L;
  constexpr int J = std::min(N, (kRegisters >= 32 ? 16 : 8) / C);
  constexpr int stride = Transposed ? 1 : N;
  const auto scale = hn::Set(d, h.scale);
  for (int j0 = 0; j0 < N; j0 += J) {
    hn::Vec<decltype(d)> sum[J][C];
    for (int j = 0; j < J; ++j)
      for (int c = 0; c < C; ++c)
        sum[j][c] = hn::Zero(d);
    for (int i = 0; i < N; ++i) {
      hn::Vec<decltype(d)> xi[C];
      for (int c = 0; c < C; ++c)
        xi[c] = hn::LoadU(d, h.x.data + i * h.x.stride + c * L);
      const S* mi = h.m + (Transposed ? i * N + j0 : j0 * N + i);
      for (int j = 0; j < J; ++j) {
        const auto mij = hn::Set(d, mi[j * stride]);
        for (int c = 0; c < C; ++c)
          sum[j][c] = hn::MulAdd(xi[c], mij, sum[j][c]);
      }
    }
    for (int j = 0; j < J; ++j)
      for (int c = 0; c < C; ++c) {
        S* out = h.out + (j0 + j) * h.out_stride + c * L;
        hn::StoreU(h.add ? hn::MulAdd(sum[j][c], scale, hn::LoadU(d, out)) : hn::Mul(sum[j][c], scale), d,
                   out);
      }
  }
}

// The kernel for the head's shape (head_shape): Gram, or times (X·M or X·Mᵀ).
template <bool Gram, int R, int N, class S>
void head_kernel(const Head<S>& h) {
  if constexpr (Gram)
    gram<R, N>(h);
  else if (h.transposed)
    times<R, N, true>(h);
  else
    times<R, N, false>(h);
}
template <bool Gram, int R, class S>
void head_length(const Head<S>& h) {
  switch (h.length) {
    case 8:
      return head_kernel<Gram, R, 8>(h);
    case 16:
      return head_kernel<Gram, R, 16>(h);
    case 32:
      return head_kernel<Gram, R, 32>(h);
  }
}
template <bool Gram, class S>
void head_any(const Head<S>& h) {
  switch (h.rows) {
    case 1:
      return head_length<Gram, 1>(h);
    case 4:
      return head_length<Gram, 4>(h);
    case 8:
      return head_length<Gram, 8>(h);
  }
}

// ---- the attention's softmax (Softmax) ----

// Each column in turn: its maximum, e^(x − max) with the sum of those, then each times 1/sum. The
// last numbers of a column that do not fill a register go through a buffer (padded with −∞, whose
// e^x is 0): a vector load or store there would pass the column's end, and the matrix's. Highway's
// Exp (1 ulp) gives 0 below −104 (float) or −1000 (double), so a masked −∞ is exactly 0; it also
// gives 0 for a NaN, which is kept instead.
template <class S>
V<S> exp_from(V<S> x, V<S> high) {
  x = hn::Sub(x, high);
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Exp(Tag<S>(), x));
}

// One column of n numbers.
template <class S>
void softmax_column(S* col, Index n) {
  const Tag<S> d;
  const Index L = hn::Lanes(d);
  constexpr S kLowest = -std::numeric_limits<S>::infinity();
  HWY_ALIGN S rest[HWY_MAX_BYTES / sizeof(S)];
  const Index whole = n - n % L, left = n - whole;
  V<S> high = hn::Set(d, kLowest);
  if (left > 0) {
    for (Index i = 0; i < L; ++i)
      rest[i] = i < left ? col[whole + i] : kLowest;
    high = hn::Load(d, rest);
  }
  for (Index i = 0; i < whole; i += L)
    high = hn::Max(high, hn::LoadU(d, col + i));
  high = hn::MaxOfLanes(d, high);
  V<S> sum = hn::Zero(d);
  for (Index i = 0; i < whole; i += L) {
    const V<S> e = exp_from<S>(hn::LoadU(d, col + i), high);
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, col + i);
  }
  if (left > 0) {  // the padding's lanes left out of the sum (0, or NaN where high is −∞)
    hn::Store(exp_from<S>(hn::Load(d, rest), high), d, rest);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, size_t(left)), hn::Load(d, rest)));
  }
  const V<S> inverse = hn::Div(hn::Set(d, S(1)), hn::SumOfLanes(d, sum));
  for (Index i = 0; i < whole; i += L)
    hn::StoreU(hn::Mul(hn::LoadU(d, col + i), inverse), d, col + i);
  if (left > 0) {
    hn::Store(hn::Mul(hn::Load(d, rest), inverse), d, rest);
    for (Index i = 0; i < left; ++i)
      col[whole + i] = rest[i];
  }
}

#if HWY_TARGET != HWY_SCALAR
template <bool Max, class S>
HWY_INLINE V<S> combined(V<S> a, V<S> b) {
  if constexpr (Max)
    return hn::Max(a, b);
  else
    return hn::Add(a, b);
}

// v[0 … L − 1], one register per column, into one register whose lane k combines (max or sum) the
// lanes of v[k]: log₂ L rounds, each turning two registers into one whose lower half holds the
// first's neighbouring lanes combined, its upper half the second's. About one operation per column
// and round where a sum across each register took log₂ L shuffles per column.
template <bool Max, class S>
V<S> lanes_per_column(V<S>* v) {
  const Tag<S> d;
  for (Index width = hn::Lanes(d); width > 1; width /= 2)
    for (Index i = 0; i < width / 2; ++i)
      v[i] = combined<Max, S>(hn::ConcatEven(d, v[2 * i + 1], v[2 * i]),
                              hn::ConcatOdd(d, v[2 * i + 1], v[2 * i]));
  return v[0];
}

// L columns at once where n is a multiple of L: their maxima, and then their sums, reduced
// together (lanes_per_column), one division for all.
template <class S>
void softmax_group(S* data, Index n) {
  const Tag<S> d;
  const Index L = hn::Lanes(d);
  constexpr Index kMax = HWY_MAX_BYTES / sizeof(S);
  HWY_ALIGN S high[kMax], inverse[kMax];
  V<S> v[kMax];
  for (Index k = 0; k < L; ++k) {
    const S* col = data + k * n;
    V<S> m = hn::LoadU(d, col);
    for (Index i = L; i < n; i += L)
      m = hn::Max(m, hn::LoadU(d, col + i));
    v[k] = m;
  }
  hn::Store(lanes_per_column<true, S>(v), d, high);
  for (Index k = 0; k < L; ++k) {
    S* col = data + k * n;
    const V<S> h = hn::Set(d, high[k]);
    V<S> sum = hn::Zero(d);
    for (Index i = 0; i < n; i += L) {
      const V<S> e = exp_from<S>(hn::LoadU(d, col + i), h);
      sum = hn::Add(sum, e);
      hn::StoreU(e, d, col + i);
    }
    v[k] = sum;
  }
  hn::Store(hn::Div(hn::Set(d, S(1)), lanes_per_column<false, S>(v)), d, inverse);
  for (Index k = 0; k < L; ++k) {
    S* col = data + k * n;
    const V<S> scale = hn::Set(d, inverse[k]);
    for (Index i = 0; i < n; i += L)
      hn::StoreU(hn::Mul(hn::LoadU(d, col + i), scale), d, col + i);
  }
}
#endif

// Where n is a multiple of a register's numbers, L columns at a time (softmax_group); the other
// columns, and other n, one at a time (softmax_column).
template <class S>
void softmax_any(const Softmax<S>& s) {
  Index k = 0;
#if HWY_TARGET != HWY_SCALAR
  const Index L = hn::Lanes(Tag<S>());
  if (s.n > 0 && s.n % L == 0)
    for (; k + L <= s.columns; k += L)
      softmax_group(s.data + k * s.n, s.n);
#endif
  for (; k < s.columns; ++k)
    softmax_column(s.data + k * s.n, s.n);
}

// ---- the softmax's backward (SoftmaxBackward) ----

// One column: its dot product Σ a·ds (registers' lanes, then across them, then the numbers past the
// last whole register), then ds = a ⊙ (ds − dot).
template <class S>
void softmax_backward_column(const S* a, S* ds, Index n) {
  const Tag<S> d;
  const Index L = hn::Lanes(d), whole = n - n % L;
  V<S> sum = hn::Zero(d);
  for (Index i = 0; i < whole; i += L)
    sum = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, ds + i), sum);
  S dot = hn::GetLane(hn::SumOfLanes(d, sum));
  for (Index i = whole; i < n; ++i)
    dot += a[i] * ds[i];
  const V<S> dots = hn::Set(d, dot);
  for (Index i = 0; i < whole; i += L)
    hn::StoreU(hn::Mul(hn::LoadU(d, a + i), hn::Sub(hn::LoadU(d, ds + i), dots)), d, ds + i);
  for (Index i = whole; i < n; ++i)
    ds[i] = a[i] * (ds[i] - dot);
}

#if HWY_TARGET != HWY_SCALAR
// L columns at once where n is a multiple of L: their dot products reduced together
// (lanes_per_column).
template <class S>
void softmax_backward_group(const S* a, S* ds, Index n) {
  const Tag<S> d;
  const Index L = hn::Lanes(d);
  constexpr Index kMax = HWY_MAX_BYTES / sizeof(S);
  HWY_ALIGN S dot[kMax];
  V<S> v[kMax];
  for (Index k = 0; k < L; ++k) {
    V<S> sum = hn::Zero(d);
    for (Index i = 0; i < n; i += L)
      sum = hn::MulAdd(hn::LoadU(d, a + k * n + i), hn::LoadU(d, ds + k * n + i), sum);
    v[k] = sum;
  }
  hn::Store(lanes_per_column<false, S>(v), d, dot);
  for (Index k = 0; k < L; ++k) {
    const V<S> dots = hn::Set(d, dot[k]);
    for (Index i = k * n; i < (k + 1) * n; i += L)
      hn::StoreU(hn::Mul(hn::LoadU(d, a + i), hn::Sub(hn::LoadU(d, ds + i), dots)), d, ds + i);
  }
}
#endif

template <class S>
void softmax_backward_any(const SoftmaxBackward<S>& s) {
  Index k = 0;
#if HWY_TARGET != HWY_SCALAR
  const Index L = hn::Lanes(Tag<S>());
  if (s.n > 0 && s.n % L == 0)
    for (; k + L <= s.columns; k += L)
      softmax_backward_group(s.a + k * s.n, s.ds + k * s.n, s.n);
#endif
  for (; k < s.columns; ++k)
    softmax_backward_column(s.a + k * s.n, s.ds + k * s.n, s.n);
}

// The exported entries (HWY_EXPORT takes plain functions): one per kernel and scalar, from the table.
#define UATLAB_SIMD_TARGET_ENTRY(NAME, ARGS, ANY) \
  void NAME##_float(const ARGS<float>& a) {       \
    ANY(a);                                       \
  }                                               \
  void NAME##_double(const ARGS<double>& a) {     \
    ANY(a);                                       \
  }
UATLAB_SIMD_KERNELS(UATLAB_SIMD_TARGET_ENTRY)
#undef UATLAB_SIMD_TARGET_ENTRY
Index LanesFloat() {
  return Index(hn::Lanes(Tag<float>()));
}
Index LanesDouble() {
  return Index(hn::Lanes(Tag<double>()));
}
Index PairedRows(Index cols) {
  return paired_rows_here(cols);
}
Index QuadRows(Index cols) {
#if HWY_TARGET == HWY_SCALAR
  (void)cols;
  return 0;
#else
  return quad_rows_here(cols);
#endif
}
bool FusedMultiplyAdd() {
  return HWY_NATIVE_FMA;
}
// The instruction set, its vector registers and a whole block's tokens (built into text once
// outside: nothing of the standard library is compiled per instruction set).
void Describe(int64_t* target, int* registers, int* whole) {
  *target = HWY_TARGET, *registers = kRegisters, *whole = kWhole;
}

}  // namespace uatlab::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstdlib>

#include "uatlab/error.hpp"

namespace uatlab::simd {

HWY_EXPORT(LanesFloat);
HWY_EXPORT(LanesDouble);
HWY_EXPORT(PairedRows);
HWY_EXPORT(QuadRows);
HWY_EXPORT(FusedMultiplyAdd);
HWY_EXPORT(Describe);

namespace {

// UATLAB_SIMD's names and the instruction sets (Highway's targets) each allows.
struct PathName {
  const char* name;
  int64_t targets;
};
constexpr PathName kPaths[] = {
    {"avx512", HWY_AVX3 | HWY_AVX3_DL},  {"avx2", HWY_AVX2}, {"sse4", HWY_SSE4}, {"neon", HWY_NEON},
    {"scalar", HWY_EMU128 | HWY_SCALAR},
};

// The targets this build compiled and this CPU runs (as far as UATLAB_SIMD and the tests let it),
// best first, one bit each; and their names as Highway gives them, in one line.
std::vector<int64_t> targets_here() {
  std::vector<int64_t> targets;
  for (int64_t t = hwy::SupportedTargets() & HWY_TARGETS; t != 0; t &= t - 1)
    targets.push_back(t & -t);
  return targets;
}
std::string available() {
  std::string names;
  for (int64_t t : targets_here())
    names += std::string(names.empty() ? "" : ", ") + hwy::TargetName(t);
  return names;
}

void restrict_to_environment() {
  const char* value = std::getenv("UATLAB_SIMD");
  if (!value || !*value) return;
  const std::string name(value);
  for (const PathName& path : kPaths)
    if (name == path.name) {
      if ((hwy::SupportedTargets() & HWY_TARGETS & path.targets) == 0)
        throw Error("UATLAB_SIMD=" + name + ": this CPU or build has no such path (it has " + available() +
                    ")");
      hwy::DisableTargets(~path.targets);
      return;
    }
  throw Error("UATLAB_SIMD=" + name + ": unknown (avx512, avx2, sse4, neon or scalar)");
}

}  // namespace

void select_path() {
  // Once, before the first kernel; an error is thrown again at every call.
  static const std::string error = [] {
    try {
      restrict_to_environment();
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  if (!error.empty()) throw Error(error);
}

// The kernels' functions (kernels.hpp): UATLAB_SIMD's choice made first, then the best copy.
#define UATLAB_SIMD_DISPATCH(NAME, ARGS, ANY) \
  HWY_EXPORT(NAME##_float);                   \
  HWY_EXPORT(NAME##_double);                  \
  template <>                                 \
  void NAME<float>(const ARGS<float>& a) {    \
    select_path();                            \
    HWY_DYNAMIC_DISPATCH(NAME##_float)(a);    \
  }                                           \
  template <>                                 \
  void NAME<double>(const ARGS<double>& a) {  \
    select_path();                            \
    HWY_DYNAMIC_DISPATCH(NAME##_double)(a);   \
  }
UATLAB_SIMD_KERNELS(UATLAB_SIMD_DISPATCH)
#undef UATLAB_SIMD_DISPATCH

template <>
Index half_block_rows<float>() {
  select_path();
  return HWY_DYNAMIC_DISPATCH(LanesFloat)();
}
template <>
Index half_block_rows<double>() {
  select_path();
  return HWY_DYNAMIC_DISPATCH(LanesDouble)();
}

Index paired_rows(Index cols) {
  select_path();
  return HWY_DYNAMIC_DISPATCH(PairedRows)(cols);
}

Index quad_rows(Index cols) {
  select_path();
  return HWY_DYNAMIC_DISPATCH(QuadRows)(cols);
}

bool fused_multiply_add() {
  select_path();
  return HWY_DYNAMIC_DISPATCH(FusedMultiplyAdd)();
}

std::vector<std::string> paths_here() {
  select_path();
  std::vector<std::string> names;
  for (int64_t t : targets_here())
    names.push_back(hwy::TargetName(t));
  return names;
}

void on_path(const std::string& name, const std::function<void()>& f) {
  select_path();
  int64_t target = 0;
  for (int64_t t : targets_here())
    if (name == hwy::TargetName(t)) target = t;
  if (target == 0) throw Error("no instruction set " + name + " here (" + available() + ")");
  struct Restore {
    ~Restore() { hwy::SetSupportedTargetsForTest(0); }
  } restore;
  hwy::SetSupportedTargetsForTest(target);
  f();
}

std::string path() {
  select_path();
  int64_t target;
  int registers, whole;
  HWY_DYNAMIC_DISPATCH(Describe)(&target, &registers, &whole);
  return std::string(hwy::TargetName(target)) + " (" + std::to_string(registers) +
         " vector registers, blocks of " + std::to_string(whole) + " tokens)";
}

}  // namespace uatlab::simd
#endif
