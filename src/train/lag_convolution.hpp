// A DP-free head's weights depend on the lag δ = q − l (query q, key l) alone: over the lags the
// mask allows, A(l, q) = w(δ) / Z_q with w(δ) = exp(B(δ) − max B) and Z_q the sum of w over query
// q's keys. Its products over a batch (V·A, dO·Aᵀ, and the bias's gradient Σ dS by lag) are then
// convolutions with one kernel w: by FFT (FFTW, in double) they cost O(n log n) a row instead of
// the O(n²) of the n×n products: ahead from 64 tokens on (docs/benchmarks.md).
//
// Accuracy: an FFT convolution's error is about ε·log₂L·‖w‖₂·‖v‖₂, the same for every output, so
// a query whose Z_q is tiny beside Σw (it sees only the kernel's far tail, e.g. an early query of a
// head that weights distant keys most) would lose its digits. Such queries (Z_q < 1e-6·Σw) are
// computed directly, in double; for every other output the error, relative to the largest |v|, is
// about ε·log₂L·√n/10⁻⁶ (5·10⁻⁸ at 2,080 tokens in double): one float rounding of that value.
// tests/test_lag_convolution.cpp compares both ways with the n×n path.
#pragma once

#include "uatlab/model/eigen.hpp"

#include "uatlab/train/backward.hpp"

namespace uatlab::lag {

// The lags [lo, hi] that a head of this mask allows (attended_keys, the one masking rule, read at
// its first and last query), clipped to ±(n − 1), and the transforms' size. Every attended_keys
// range is of this form. Throws Error past FFTW's int sizes (sequences of about 2^30 tokens).
LagHead allowed_lags(const LayerSpec& s, long n);

// Fill head's weights and normalisers from its bias by offset (bias_by_offset's order: entry o is
// the offset l − q = o − (n − 1)); head.n, lo and hi from allowed_lags.
void set_weights(LagHead& head, const Eigen::VectorXd& bias_by_offset);

// O = V·A for sequences of one head: column r of V (n × R) is one sequence's values of one of the
// head's channels (a column, so that each is contiguous); O likewise.
void forward(const LagHead& head, const Eigen::MatrixXd& V, Eigen::MatrixXd& O);

// Given dO (n × R) and the forward's V and O: dV = dO·Aᵀ (n × R), and by offset (bias_by_offset's order)
// the sum over queries of dS = A ⊙ (dA − 1·Σ_l A⊙dA), dA = Vᵀ dO: the bias's gradient before its
// derivative in the rate (lin, log) or its bucket (t5) is applied.
void backward(const LagHead& head, const Eigen::MatrixXd& V, const Eigen::MatrixXd& dO,
              const Eigen::MatrixXd& O, Eigen::MatrixXd& dV, Eigen::VectorXd& dbias_by_offset);

// From this length on, float training of DP-free softmax heads goes by FFT (measured:
// docs/benchmarks.md, "DP-free heads by FFT").
inline constexpr long kMinLength = 64;

}  // namespace uatlab::lag
