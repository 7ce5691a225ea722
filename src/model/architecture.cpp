#include "uatlab/model/architecture.hpp"

#include "uatlab/io/json.hpp"
#include "uatlab/limits.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "uatlab/model/scalar.hpp"

namespace uatlab {

using nlohmann::json;

int t5_bucket(int rel, bool bidirectional, int num_buckets, int max_distance) {
  int offset = 0, n;
  if (bidirectional) {
    num_buckets /= 2;
    if (rel > 0) offset = num_buckets;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  const int max_exact = num_buckets / 2;
  if (n < max_exact) return offset + n;
  int b = max_exact + static_cast<int>(std::log(static_cast<double>(n) / max_exact) /
                                       std::log(static_cast<double>(max_distance) / max_exact) *
                                       (num_buckets - max_exact));
  return offset + std::min(b, num_buckets - 1);
}

bool Piecewise::in_yun_class() const {
  if (pieces.size() > 3) return false;
  for (auto& p : pieces)
    if (parse_rational(p.first) == 0) return true;
  return false;
}

bool LayerSpec::needs_transcendental() const {
  if (pre_norm || kind == LayerKind::layernorm) return true;  // sqrt
  if (kind == LayerKind::feedforward) return gelu;            // erf
  if (kind != LayerKind::attention) return false;
  return score == Score::softmax || sqrt_scaling || rpe == Rpe::log || rope > 0;
}

std::string LayerSpec::describe() const {
  const std::string what = describe_kind();
  return source.empty() ? what : what + " [" + source + "]";
}

std::string LayerSpec::describe_kind() const {
  std::string s = pre_norm ? "pre-norm " : "";
  switch (kind) {
    case LayerKind::attention:
      s += "attention: " + std::to_string(heads) + " head(s) of size " + std::to_string(head_size) + ", " +
           score_names(score);
      if (scale != "1") s += " scale " + scale;
      if (sqrt_scaling) s += ", 1/sqrt(s)";
      if (rpe != Rpe::none)
        s += std::string(", ") + rpe_names(rpe) + " bias" + (dp_free ? " only (DP-free)" : "");
      if (rope > 0) s += ", rotary positions (base " + std::to_string(rope) + ")";
      if (causal) s += strict_past ? ", causal (strict past)" : ", causal";
      if (window > 0) s += ", window " + std::to_string(window);
      if (tied_qkv) s += ", tied Q=K=V";
      if (bias) s += ", biases";
      return s;
    case LayerKind::feedforward:
      return s + "feedforward: width " + std::to_string(width) + ", " +
             (piecewise ? std::to_string(activation.pieces.size()) + "-piece linear activation"
              : gelu    ? std::string(gelu_tanh ? "GELU (tanh form)" : "GELU")
                        : std::string("ReLU"));
    case LayerKind::layernorm:
      return "layernorm";
    case LayerKind::bproj:
      return s + "bilinear projection: W_P of " + std::to_string(length) + " tokens" +
             (causal ? ", causal" : "") + (bias ? ", bias" : "");
    case LayerKind::sepconv:
      return s + "separable convolution: " + std::to_string(heads) + " filter(s) of " +
             std::to_string(kernel) + " taps" + (causal ? ", causal" : ", centred") + (bias ? ", bias" : "");
  }
  return s;
}

bool Architecture::needs_transcendental() const {
  for (auto& l : layers)
    if (l.needs_transcendental()) return true;
  return false;
}

namespace {

std::string where(std::size_t i) {
  return "layer " + std::to_string(i) + ": ";
}

// A number field that must stay exact: accepts "1/3", "0.5", 2, 0.5.
std::string exact_text(const json& v, const std::string& what) {
  std::string t = v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : "";
  if (t.empty()) throw Error(what + " must be a number or a numeric string");
  parse_rational(t);  // throws with the text if malformed
  return t;
}

int positive_int(const json& v, const std::string& what, int min = 1) {
  if (!v.is_number_integer() || v.get<long long>() < min || v.get<long long>() > (1LL << 30))
    throw Error(what + " must be an integer >= " + std::to_string(min) + ", got " + v.dump());
  return v.get<int>();
}

bool boolean(const json& v, const std::string& what) {
  if (!v.is_boolean()) throw Error(what + " must be true or false, got " + v.dump());
  return v.get<bool>();
}

void reject_unknown(const json& obj, const std::set<std::string>& known, const std::string& what) {
  for (auto& [k, _] : obj.items())
    if (!known.count(k)) throw Error(what + "unknown field \"" + k + "\"");
}
// A sub-layer's fields: its kind's, and "source" (every kind may carry one).
void reject_unknown_in_layer(const json& obj, std::set<std::string> known, const std::string& what) {
  known.insert("source");
  reject_unknown(obj, known, what);
}

// Where a sub-layer came from (e.g. PyTorch's "layers.0.self_attn"): printable ASCII, at most 200
// characters, since it is printed in reports.
std::string source_name(const json& v, const std::string& what) {
  if (!v.is_string()) throw Error(what + " must be a string, got " + v.dump());
  const std::string s = v.get<std::string>();
  if (s.empty() || s.size() > 200 ||
      std::any_of(s.begin(), s.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
    throw Error(what + " must be 1 to 200 printable ASCII characters");
  return s;
}

template <auto Last>
auto enum_of(const json& v, const EnumNames<Last>& names, const std::string& what) {
  for (std::size_t i = 0; i < names.count && v.is_string(); ++i)
    if (v.get<std::string>() == names.names[i]) return static_cast<decltype(Last)>(i);
  throw Error(what + " must be " + names.choices() + ", got " + v.dump());
}

}  // namespace

void Architecture::check_token_kind(bool token_ids) const {
  auto kind = [](bool ids) { return ids ? "token ids" : "continuous tokens"; };
  if (token_ids != (vocab > 0))
    throw Error(std::string("the network takes ") + kind(vocab > 0) + ", the data has " + kind(token_ids));
}

void Architecture::check_width(long long numbers_per_token) const {
  if (numbers_per_token != in_dim())
    throw Error("the data's tokens have " + std::to_string(numbers_per_token) +
                " numbers, the network takes " + (input > 0 ? "input = " : "d = ") +
                std::to_string(in_dim()));
}

long long Architecture::parameter_count() const {
  const long long D = d;  // every size is <= 2^30 and every product of two <= 2^30 (validate)
  long long n =
      D * (vocab + max_len) + (readout > 0 ? (D + 1) * readout : 0) + (input > 0 ? D * (input + 1LL) : 0);
  for (const LayerSpec& l : layers) {
    if (l.pre_norm || l.kind == LayerKind::layernorm) n += 2 * D;
    if (l.kind == LayerKind::attention) {
      const long long hs = static_cast<long long>(l.heads) * l.head_size, qkv = l.tied_qkv ? 1 : 3;
      n += (qkv + 1) * hs * D + (l.bias ? qkv * hs + D : 0);
      if (l.rpe == Rpe::lin || l.rpe == Rpe::log) n += l.heads;
      if (l.rpe == Rpe::t5) n += static_cast<long long>(l.heads) * l.t5_buckets;
    } else if (l.kind == LayerKind::feedforward) {
      const long long width = l.width;
      n += 2 * width * D + width + D;
    } else if (l.kind == LayerKind::bproj) {
      n += D * D + static_cast<long long>(l.length) * l.length + (l.bias ? D : 0);
    } else if (l.kind == LayerKind::sepconv) {
      n += D * D + static_cast<long long>(l.heads) * l.kernel + (l.bias ? D : 0);
    }
  }
  return n;
}

void Architecture::validate() const {
  constexpr long long kMax = limits::kSize;  // every size; products of two sizes are checked too
  auto in_range = [](long long v, long long lo, const std::string& what) {
    if (v < lo || v > kMax)
      throw Error(what + " must be from " + std::to_string(lo) + " to 2^30, got " + std::to_string(v));
  };
  in_range(d, 1, "architecture: d");
  in_range(vocab, 0, "architecture: vocab");
  in_range(max_len, 0, "architecture: max_len");
  in_range(readout, 0, "architecture: readout");
  in_range(input, 0, "architecture: input");
  if (static_cast<long long>(d) * std::max({vocab, max_len, readout, input, 1}) > kMax)
    throw Error("architecture: d times vocab, input, max_len or readout exceeds 2^30 weights");
  if (vocab > 0 && input > 0)
    throw Error("architecture: token ids (vocab) or an input projection (input), not both");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const std::string w = where(i);
    if (l.pre_norm || l.kind == LayerKind::layernorm)
      if (parse_rational(l.eps) <= 0) throw Error(w + "eps must be > 0");
    if (l.kind == LayerKind::layernorm && l.pre_norm)
      throw Error(w + "a layernorm sub-layer has no pre_norm");
    if (l.kind == LayerKind::attention) {
      in_range(l.heads, 1, w + "heads");
      in_range(l.head_size, 1, w + "head_size");
      if (static_cast<long long>(l.heads) * l.head_size * d > kMax)
        throw Error(w + "heads * head_size * d exceeds 2^30 weights");
      // T5 splits the buckets into exact and logarithmic ones, by direction unless causal: at
      // least one exact bucket per direction needs 2 buckets (causal) or 4.
      const int least = l.causal ? 2 : 4;
      if (l.rpe == Rpe::t5 && (l.t5_buckets < least || l.t5_buckets > 4096 ||
                               l.t5_max_distance <= l.t5_buckets / 2 || l.t5_max_distance > kMax))
        throw Error(w + "t5 needs " + std::to_string(least) + " <= t5_buckets <= 4096 (" +
                    (l.causal ? "causal" : "bidirectional") + ") and t5_buckets/2 < t5_max_distance <= 2^30");
      if (l.dp_free && l.rpe == Rpe::none)
        throw Error(w + "dp_free attention needs a relative-position bias (rpe)");
      if (l.strict_past && !l.causal) throw Error(w + "strict_past needs causal");
      in_range(l.rope, 0, w + "rope");
      if (l.rope == 1) throw Error(w + "rope (the rotary base) must be at least 2, or 0 for none");
      if (l.rope > 0 && (l.head_size % 2 != 0 || l.dp_free || l.tied_qkv))
        throw Error(w +
                    "rope turns pairs of query and key coordinates: it needs an even head_size, "
                    "a dot product (not dp_free) and separate Q and K (not tied_qkv)");
      in_range(l.window, 0, w + "window");
      if (l.window > 0 && !l.causal) throw Error(w + "window needs causal");
      parse_rational(l.scale);
    } else if (l.kind == LayerKind::bproj) {
      in_range(l.length, 1, w + "bproj length");
      if (static_cast<long long>(l.length) * l.length > kMax || static_cast<long long>(d) * d > kMax)
        throw Error(w + "length^2 or d^2 exceeds 2^30 weights");
    } else if (l.kind == LayerKind::sepconv) {
      in_range(l.heads, 1, w + "sepconv heads");
      in_range(l.kernel, 1, w + "sepconv kernel");
      if (l.kernel > (1 << 16)) throw Error(w + "sepconv kernel must be at most 65536");
      if (d % l.heads != 0) throw Error(w + "sepconv heads must divide d");
      if (!l.causal && l.kernel % 2 == 0)
        throw Error(w + "a centred (non-causal) sepconv needs an odd kernel");
      if (static_cast<long long>(d) * d > kMax) throw Error(w + "d^2 exceeds 2^30 weights");
    } else if (l.kind == LayerKind::feedforward) {
      in_range(l.width, 1, w + "feedforward width");
      if (static_cast<long long>(l.width) * d > kMax) throw Error(w + "width * d exceeds 2^30 weights");
      if (l.piecewise && l.gelu) throw Error(w + "an activation is either piecewise or GELU");
      if (l.piecewise) {
        auto& a = l.activation;
        if (a.pieces.size() != a.breakpoints.size() + 1)
          throw Error(w + "a piecewise activation with k breakpoints needs k+1 pieces");
        for (std::size_t k = 1; k < a.breakpoints.size(); ++k)
          if (parse_rational(a.breakpoints[k - 1]) >= parse_rational(a.breakpoints[k]))
            throw Error(w + "activation breakpoints must be strictly increasing");
      }
    }
  }
  // Each term is a product of two checked sizes: the sum of all of them cannot overflow.
  if (parameter_count() > kMax)
    throw Error("architecture: " + std::to_string(parameter_count()) + " weights in all exceed 2^30");
}

json Architecture::to_json() const {
  json ls = json::array();
  for (auto& l : layers) {
    json j;
    switch (l.kind) {
      case LayerKind::attention:
        j = {{"type", layer_kind_names(l.kind)}, {"heads", l.heads},     {"head_size", l.head_size},
             {"score", score_names(l.score)},    {"scale", l.scale},     {"sqrt_scaling", l.sqrt_scaling},
             {"rpe", rpe_names(l.rpe)},          {"dp_free", l.dp_free}, {"causal", l.causal},
             {"tied_qkv", l.tied_qkv},           {"bias", l.bias}};
        if (l.strict_past) j["strict_past"] = true;  // written only when set: older readers keep working
        if (l.window > 0) j["window"] = l.window;
        if (l.rope > 0) j["rope"] = l.rope;
        if (l.rpe == Rpe::t5) {
          j["t5_buckets"] = l.t5_buckets;
          j["t5_max_distance"] = l.t5_max_distance;
        }
        break;
      case LayerKind::feedforward:
        j = {{"type", layer_kind_names(l.kind)}, {"width", l.width}};
        if (l.piecewise) {
          json pieces = json::array();
          for (auto& p : l.activation.pieces)
            pieces.push_back({p.first, p.second});
          j["activation"] = {
              {"type", "piecewise"}, {"breakpoints", l.activation.breakpoints}, {"pieces", pieces}};
        } else {
          j["activation"] = l.gelu_tanh ? "gelu_tanh" : l.gelu ? "gelu" : "relu";
        }
        break;
      case LayerKind::layernorm:
        j = {{"type", layer_kind_names(l.kind)}};
        break;
      case LayerKind::bproj:
        j = {
            {"type", layer_kind_names(l.kind)}, {"length", l.length}, {"causal", l.causal}, {"bias", l.bias}};
        break;
      case LayerKind::sepconv:
        j = {{"type", layer_kind_names(l.kind)},
             {"heads", l.heads},
             {"kernel", l.kernel},
             {"causal", l.causal},
             {"bias", l.bias}};
        break;
    }
    if (l.kind != LayerKind::layernorm) j["pre_norm"] = l.pre_norm;
    if (l.pre_norm || l.kind == LayerKind::layernorm) j["eps"] = l.eps;
    if (!l.source.empty()) j["source"] = l.source;
    ls.push_back(j);
  }
  json j = {{"format", "uatlab-architecture-1"},
            {"d", d},
            {"vocab", vocab},
            {"max_len", max_len},
            {"readout", readout},
            {"pool", pool ? "sum" : "none"},
            {"layers", ls}};
  if (input > 0) j["input"] = input;
  return j;
}

Architecture Architecture::from_json(const json& j) try {
  if (!j.is_object()) throw Error("architecture must be a JSON object");
  reject_unknown(j, {"format", "d", "vocab", "input", "max_len", "readout", "pool", "layers"},
                 "architecture: ");
  if (j.contains("format") && j["format"] != "uatlab-architecture-1")
    throw Error("architecture: unsupported format " + j["format"].dump());
  Architecture a;
  if (!j.contains("d")) throw Error("architecture: missing \"d\"");
  a.d = positive_int(j["d"], "architecture: d");
  if (j.contains("vocab")) a.vocab = positive_int(j["vocab"], "architecture: vocab", 0);
  if (j.contains("input")) a.input = positive_int(j["input"], "architecture: input", 0);
  if (j.contains("max_len")) a.max_len = positive_int(j["max_len"], "architecture: max_len", 0);
  if (j.contains("readout")) a.readout = positive_int(j["readout"], "architecture: readout", 0);
  if (j.contains("pool")) {
    if (j["pool"] != "none" && j["pool"] != "sum")
      throw Error("architecture: pool must be \"none\" or \"sum\", got " + j["pool"].dump());
    a.pool = j["pool"] == "sum";
  }
  if (j.contains("layers")) {
    if (!j["layers"].is_array()) throw Error("architecture: layers must be an array");
    for (std::size_t i = 0; i < j["layers"].size(); ++i) {
      const json& lj = j["layers"][i];
      std::string w = where(i);
      if (!lj.is_object() || !lj.contains("type")) throw Error(w + "must be an object with a \"type\"");
      LayerSpec l;
      l.kind = enum_of(lj["type"], layer_kind_names, w + "type");
      if (lj.contains("pre_norm")) l.pre_norm = boolean(lj["pre_norm"], w + "pre_norm");
      if (lj.contains("eps")) l.eps = exact_text(lj["eps"], w + "eps");
      if (lj.contains("source")) l.source = source_name(lj["source"], w + "source");
      if (l.kind == LayerKind::attention) {
        reject_unknown_in_layer(lj,
                                {"type", "heads", "head_size", "score", "scale", "sqrt_scaling", "rpe",
                                 "t5_buckets", "t5_max_distance", "dp_free", "causal", "strict_past",
                                 "window", "rope", "tied_qkv", "bias", "pre_norm", "eps"},
                                w);
        if (lj.contains("heads")) l.heads = positive_int(lj["heads"], w + "heads");
        if (lj.contains("head_size")) l.head_size = positive_int(lj["head_size"], w + "head_size");
        if (lj.contains("score")) l.score = enum_of(lj["score"], score_names, w + "score");
        if (lj.contains("scale")) l.scale = exact_text(lj["scale"], w + "scale");
        if (lj.contains("sqrt_scaling")) l.sqrt_scaling = boolean(lj["sqrt_scaling"], w + "sqrt_scaling");
        if (lj.contains("rpe")) l.rpe = enum_of(lj["rpe"], rpe_names, w + "rpe");
        if (lj.contains("t5_buckets")) l.t5_buckets = positive_int(lj["t5_buckets"], w + "t5_buckets");
        if (lj.contains("t5_max_distance"))
          l.t5_max_distance = positive_int(lj["t5_max_distance"], w + "t5_max_distance");
        if (lj.contains("dp_free")) l.dp_free = boolean(lj["dp_free"], w + "dp_free");
        if (lj.contains("causal")) l.causal = boolean(lj["causal"], w + "causal");
        if (lj.contains("strict_past")) l.strict_past = boolean(lj["strict_past"], w + "strict_past");
        if (lj.contains("window")) l.window = positive_int(lj["window"], w + "window", 0);
        if (lj.contains("rope")) l.rope = positive_int(lj["rope"], w + "rope", 0);
        if (lj.contains("tied_qkv")) l.tied_qkv = boolean(lj["tied_qkv"], w + "tied_qkv");
        if (lj.contains("bias")) l.bias = boolean(lj["bias"], w + "bias");
      } else if (l.kind == LayerKind::feedforward) {
        reject_unknown_in_layer(lj, {"type", "width", "activation", "pre_norm", "eps"}, w);
        if (!lj.contains("width")) throw Error(w + "feedforward needs \"width\"");
        l.width = positive_int(lj["width"], w + "width");
        if (lj.contains("activation") && (lj["activation"] == "gelu" || lj["activation"] == "gelu_tanh")) {
          l.gelu = true;
          l.gelu_tanh = lj["activation"] == "gelu_tanh";
        } else if (lj.contains("activation") && lj["activation"] != "relu") {
          const json& aj = lj["activation"];
          if (!aj.is_object() || string_field(aj, "type") != "piecewise" || !aj.contains("breakpoints") ||
              !aj.contains("pieces") || !aj["breakpoints"].is_array() || !aj["pieces"].is_array())
            throw Error(w +
                        "activation must be \"relu\", \"gelu\", \"gelu_tanh\" or "
                        "{\"type\":\"piecewise\",\"breakpoints\":[...],\"pieces\":[[slope,intercept],...]}");
          l.piecewise = true;
          for (auto& b : aj["breakpoints"])
            l.activation.breakpoints.push_back(exact_text(b, w + "breakpoint"));
          for (auto& p : aj["pieces"]) {
            if (!p.is_array() || p.size() != 2) throw Error(w + "each piece must be [slope, intercept]");
            l.activation.pieces.emplace_back(exact_text(p[0], w + "slope"),
                                             exact_text(p[1], w + "intercept"));
          }
        }
      } else if (l.kind == LayerKind::bproj || l.kind == LayerKind::sepconv) {
        const bool bp = l.kind == LayerKind::bproj;
        reject_unknown_in_layer(
            lj,
            bp ? std::set<std::string>{"type", "length", "causal", "bias", "pre_norm", "eps"}
               : std::set<std::string>{"type", "heads", "kernel", "causal", "bias", "pre_norm", "eps"},
            w);
        if (bp) {
          if (!lj.contains("length")) throw Error(w + "bproj needs \"length\" (the largest n)");
          l.length = positive_int(lj["length"], w + "length");
        } else {
          if (!lj.contains("kernel")) throw Error(w + "sepconv needs \"kernel\"");
          l.kernel = positive_int(lj["kernel"], w + "kernel");
          if (lj.contains("heads")) l.heads = positive_int(lj["heads"], w + "heads");
        }
        if (lj.contains("causal")) l.causal = boolean(lj["causal"], w + "causal");
        if (lj.contains("bias")) l.bias = boolean(lj["bias"], w + "bias");
      } else {
        reject_unknown_in_layer(lj, {"type", "eps"}, w);
      }
      a.layers.push_back(l);
    }
  }
  a.validate();
  return a;
} catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type
  throw Error(std::string("architecture") + ": malformed (" + e.what() + ")");
}

}  // namespace uatlab
