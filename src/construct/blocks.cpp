#include "uatlab/construct/blocks.hpp"

#include <cmath>
#include <cstdint>

namespace uatlab::blocks {

Mat<Rational> unit(int d, int i) {
  Mat<Rational> e = Mat<Rational>::Zero(d, 1);
  e(i, 0) = 1;
  return e;
}

LayerSpec feedforward(int width) {
  LayerSpec f;
  f.kind = LayerKind::feedforward;
  f.width = width;
  return f;
}

LayerSpec piecewise_unit(const std::vector<Rational>& breakpoints,
                         const std::vector<std::pair<Rational, Rational>>& pieces) {
  LayerSpec f = feedforward(1);
  f.piecewise = true;
  for (const Rational& b : breakpoints)
    f.activation.breakpoints.push_back(b.str());
  for (const auto& [slope, intercept] : pieces)
    f.activation.pieces.push_back({slope.str(), intercept.str()});
  return f;
}

LayerSpec hardmax_shift(int heads) {
  LayerSpec a;
  a.kind = LayerKind::attention;
  a.heads = heads;
  a.head_size = 1;
  a.score = Score::hardmax;
  a.bias = true;
  return a;
}

LayerSpec rank1_attention(bool tied) {
  LayerSpec s;
  s.kind = LayerKind::attention;
  s.heads = 1;
  s.head_size = 1;
  s.score = Score::softmax;
  s.tied_qkv = tied;
  return s;
}

void fill_rank1(Layer<Rational>& L, const Vec<Rational>& v, const Rational& c, const Rational& wo_scale,
                bool tied) {
  if (tied) {
    const Rational root = rational_of(std::sqrt(Scalar<Rational>::to_double(c)));
    L.wq = root * v.transpose();
    L.wo = (wo_scale / root) * v;
  } else {
    L.wq = c * v.transpose();
    L.wk = v.transpose();
    L.wv = v.transpose();
    L.wo = wo_scale * v;
  }
}

Builder::Builder(int d, int max_len) {
  arch_.d = d;
  arch_.max_len = max_len;
}

Builder& Builder::add(const LayerSpec& spec, Fill fill) {
  arch_.layers.push_back(spec);
  fills_.push_back(std::move(fill));
  return *this;
}

Builder& Builder::append(const Network<Rational>& net, std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < std::min(last, net.layers.size()); ++i)
    add(net.arch.layers[i], [layer = net.layers[i]](Layer<Rational>& L) { L = layer; });
  return *this;
}

Builder& Builder::positions(std::function<void(Mat<Rational>&)> fill) {
  positions_ = std::move(fill);
  return *this;
}

Builder& Builder::readout(int k, std::function<void(Mat<Rational>& w, Mat<Rational>& b)> fill) {
  arch_.readout = k;
  readout_ = std::move(fill);
  return *this;
}

namespace {

// The shapes of a sub-layer's tensors, in a fixed order.
std::vector<std::pair<Eigen::Index, Eigen::Index>> shapes(const Layer<Rational>& L) {
  std::vector<std::pair<Eigen::Index, Eigen::Index>> s;
  for (const Mat<Rational>* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.bo, &L.rpe, &L.w1, &L.b1,
                                 &L.w2, &L.b2, &L.wp, &L.filter, &L.norm_w, &L.norm_b})
    s.push_back({m->rows(), m->cols()});
  return s;
}

}  // namespace

Network<Rational> Builder::build() const {
  arch_.validate();
  Network<Rational> net(arch_);
  for (std::size_t i = 0; i < fills_.size(); ++i) {
    const auto before = shapes(net.layers[i]);
    const LayerSpec spec = net.layers[i].spec;
    fills_[i](net.layers[i]);
    if (shapes(net.layers[i]) != before || net.layers[i].spec.kind != spec.kind)
      throw Error("construction: sub-layer " + std::to_string(i) + " (" + spec.describe() +
                  ") was filled with tensors of another shape");
  }
  auto same_shape = [](const Mat<Rational>& a, Eigen::Index rows, Eigen::Index cols, const char* what) {
    if (a.rows() != rows || a.cols() != cols)
      throw Error(std::string("construction: the ") + what + " was filled with another shape");
  };
  if (positions_) {
    const Eigen::Index r = net.pe.rows(), c = net.pe.cols();
    positions_(net.pe);
    same_shape(net.pe, r, c, "positional encoding");
  }
  if (readout_) {
    const Eigen::Index r = net.readout_w.rows(), c = net.readout_w.cols();
    readout_(net.readout_w, net.readout_b);
    same_shape(net.readout_w, r, c, "readout");
    same_shape(net.readout_b, r, 1, "readout bias");
  }
  return net;
}

}  // namespace uatlab::blocks
