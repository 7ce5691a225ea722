// The smallest classification data a test can set by hand: two one-token sequences, x = +1 of
// class 0 and x = −1 of class 1, and a readout-only network for them (d = 1, two classes, all
// weights zero), whose logits the test writes itself.
#pragma once

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/network.hpp"

inline uatlab::Dataset sign_classes() {
  using namespace uatlab;
  Dataset data;
  data.d = 1, data.label_dim = 1;
  for (int label : {0, 1}) {
    Sequence s;
    s.x = Mat<Rational>::Constant(1, 1, Rational(label == 0 ? 1 : -1));
    s.y = Mat<Rational>::Constant(1, 1, Rational(label));
    data.sequences.push_back(s);
  }
  return data;
}

inline uatlab::Network<float> sign_classifier() {
  uatlab::Architecture a;
  a.d = 1, a.readout = 2;
  return uatlab::Network<float>(a);
}
