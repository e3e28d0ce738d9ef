// The recurrent state of a whole model: one retention state per layer plus the number of
// tokens each batch entry has consumed (positions drive the rotation and decay factors).
// A value type: fixed size whatever the sequence length, copyable (to branch a generation),
// and serialisable with a version, shape and size check and the fingerprint of its model
// (model_fingerprint), so that it cannot be loaded into another model of the same shapes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <istream>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/kernels/retention_common.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

template <typename Scalar>
struct ModelState {
  std::vector<RetentionState<Scalar>> layers;  // each [batch, heads, dk, dv + 1]
  std::vector<int64_t> positions;              // tokens consumed, per batch entry

  Index batch() const { return static_cast<Index>(positions.size()); }

  /// Bytes held by the state (retention states and positions).
  size_t size_bytes() const {
    size_t n = positions.size() * sizeof(int64_t);
    for (const auto& s : layers) n += static_cast<size_t>(s.size()) * sizeof(Scalar);
    return n;
  }

  /// Batch entry `b` alone, as a batch of one.
  ModelState select(Index b) const {
    RETNET_REQUIRE(b >= 0 && b < batch(), "ModelState::select: batch entry " + std::to_string(b) +
                                              " is outside [0, " + std::to_string(batch()) + ")");
    ModelState out;
    out.positions = {positions[b]};
    out.layers.reserve(layers.size());  // Eigen tensors are copied, not moved, when a vector grows
    for (const auto& s : layers) {
      RetentionState<Scalar> one(1, s.dimension(1), s.dimension(2), s.dimension(3));
      const Index block = one.size();
      std::copy_n(s.data() + b * block, block, one.data());
      out.layers.push_back(std::move(one));
    }
    return out;
  }

  /// The batch entries of `parts`, in order, as one state (all must come from one model).
  static ModelState concatenate(const std::vector<ModelState>& parts) {
    RETNET_REQUIRE(!parts.empty(), "ModelState::concatenate: no states given");
    ModelState out;
    Index total = 0;
    for (const auto& p : parts) {
      RETNET_REQUIRE(p.layers.size() == parts[0].layers.size(),
                     "ModelState::concatenate: states have different numbers of layers");
      total += p.batch();
      out.positions.insert(out.positions.end(), p.positions.begin(), p.positions.end());
    }
    out.layers.reserve(parts[0].layers.size());
    for (size_t l = 0; l < parts[0].layers.size(); ++l) {
      const auto& first = parts[0].layers[l];
      RetentionState<Scalar> s(total, first.dimension(1), first.dimension(2), first.dimension(3));
      Scalar* dst = s.data();
      for (const auto& p : parts) {
        const auto& src = p.layers[l];
        RETNET_REQUIRE(src.dimension(1) == first.dimension(1) &&
                           src.dimension(2) == first.dimension(2) &&
                           src.dimension(3) == first.dimension(3),
                       "ModelState::concatenate: layer " + std::to_string(l) + " shapes differ");
        dst = std::copy_n(src.data(), src.size(), dst);
      }
      out.layers.push_back(std::move(s));
    }
    return out;
  }

  // Stream format (docs/FORMATS.md, "State files"), little-endian:
  //   "RETNETST" | u32 version (2) | u32 sizeof(Scalar) | u64 model fingerprint |
  //   u64 layers | u64 batch | u64 heads | u64 dk | u64 columns |
  //   i64 positions[batch] | Scalar data[layers][batch][heads][dk][columns]
  // Version 1 had no fingerprint.
  static constexpr uint32_t kVersion = 2;
  /// Bytes before the positions.
  static constexpr uint64_t kHeaderBytes = 8 + 4 + 4 + 8 + 5 * 8;
  /// Largest state load() accepts: positions and data together, checked from the header
  /// before anything is allocated (a 7B-parameter RetNet holds about 0.3 GB per sequence).
  static constexpr uint64_t kMaxBytes = uint64_t{16} << 30;
  /// Largest position (tokens consumed) save() writes and load() accepts: 2^40, far beyond any
  /// sequence, and small enough that position arithmetic never overflows.
  static constexpr int64_t kMaxPosition = int64_t{1} << 40;

  /// Writes the state with `fingerprint`, the model_fingerprint() of the model it belongs to;
  /// load() refuses it for any other model.
  void save(std::ostream& out, uint64_t fingerprint) const {
    RETNET_REQUIRE(!layers.empty(), "ModelState::save: empty state");
    const auto& d = layers[0].dimensions();
    RETNET_REQUIRE(static_cast<Index>(positions.size()) == d[0] && d[0] > 0,
                   "ModelState::save: " + std::to_string(positions.size()) +
                       " positions for a state of batch " + std::to_string(d[0]));
    for (const auto& s : layers)
      RETNET_REQUIRE(s.dimensions() == d, "ModelState::save: layers of different shapes");
    for (int64_t p : positions)
      RETNET_REQUIRE(p >= 0 && p <= kMaxPosition,
                     "ModelState::save: position " + std::to_string(p) + " outside [0, 2^40]");
    out.write("RETNETST", 8);
    put<uint32_t>(out, kVersion);
    put<uint32_t>(out, sizeof(Scalar));
    put<uint64_t>(out, fingerprint);
    for (uint64_t v :
         {uint64_t(layers.size()), uint64_t(d[0]), uint64_t(d[1]), uint64_t(d[2]), uint64_t(d[3])})
      put<uint64_t>(out, v);
    for (int64_t p : positions) put<int64_t>(out, p);
    for (const auto& s : layers)
      out.write(reinterpret_cast<const char*>(s.data()),
                std::streamsize(s.size() * sizeof(Scalar)));
    if (!out) throw Error("ModelState::save: write failed");
  }

  /// Reads a state saved by `save` and checks it against `expected` (e.g. model.new_state(1)):
  /// same layers, heads, dk and columns (the batch may differ), saved with `fingerprint` (that
  /// of the model it is loaded into). Every header field is validated before anything is
  /// allocated: the size the header declares must be at most kMaxBytes and, when the stream can
  /// tell, no more than the bytes that follow; positions lie in [0, kMaxPosition] and every value
  /// is finite. Reads exactly the state: a caller that reads nothing after it should call
  /// expect_end_of_state(). Throws FormatError "SOURCE: ..." naming the field.
  static ModelState load(std::istream& in, const ModelState& expected, uint64_t fingerprint,
                         const std::string& source = "state") {
    char magic[8] = {};
    in.read(magic, 8);
    if (!in || std::memcmp(magic, "RETNETST", 8) != 0)
      throw FormatError(source + ": not a retnet state file (bad magic)");
    const auto version = get<uint32_t>(in, source);
    if (version == 1)
      throw FormatError(source + ": state version 1 (saved without a model fingerprint), " +
                        "expected " + std::to_string(kVersion) + ": save the state again");
    if (version != kVersion)
      throw FormatError(source + ": state version " + std::to_string(version) + ", expected " +
                        std::to_string(kVersion));
    const auto scalar = get<uint32_t>(in, source);
    if (scalar != sizeof(Scalar))
      throw FormatError(source + ": state scalar size " + std::to_string(scalar) +
                        " bytes, expected " + std::to_string(sizeof(Scalar)));
    const auto stored_fingerprint = get<uint64_t>(in, source);
    uint64_t dims[5];
    for (auto& v : dims) v = get<uint64_t>(in, source);
    RETNET_REQUIRE(!expected.layers.empty(), "ModelState::load: empty expected state");
    const auto& e = expected.layers[0].dimensions();
    const uint64_t want[5] = {uint64_t(expected.layers.size()), dims[1], uint64_t(e[1]),
                              uint64_t(e[2]), uint64_t(e[3])};
    const char* names[5] = {"layers", "batch", "heads", "dk", "columns"};
    for (int i = 0; i < 5; ++i)
      if (dims[i] != want[i])
        throw FormatError(source + ": state has " + names[i] + " = " + std::to_string(dims[i]) +
                          ", the model expects " + std::to_string(want[i]));
    // The size the header declares, checked before it is allocated or read.
    const uint64_t batch = dims[1];
    if (batch == 0) throw FormatError(source + ": state batch 0, expected at least 1");
    uint64_t per_entry = sizeof(int64_t), layer_entry = sizeof(Scalar);  // bytes per batch entry
    for (int i = 2; i < 5; ++i) layer_entry *= dims[i];  // each matches the model: no overflow
    per_entry += layer_entry * dims[0];
    const uint64_t total = per_entry * batch;
    if (batch > kMaxBytes / per_entry)
      throw FormatError(source + ": state declares batch " + std::to_string(batch) + ": " +
                        bytes_string(batch, per_entry) + " of positions and state, more than " +
                        "the limit of " + std::to_string(kMaxBytes >> 30) + " GiB");
    const int64_t left = bytes_left(in);
    if (left >= 0 && static_cast<uint64_t>(left) < total)
      throw FormatError(source + ": state declares batch " + std::to_string(batch) + ": " +
                        std::to_string(total) + " bytes of positions and state, but only " +
                        std::to_string(left) + " bytes follow the header (truncated or corrupt)");
    if (stored_fingerprint != fingerprint)
      throw FormatError(source + ": state was saved for another model (model fingerprint " +
                        hex(stored_fingerprint) + ", this model's is " + hex(fingerprint) +
                        "): expected a state saved with this model");
    if (left < 0) {
      // A stream of unknown length (a pipe): take the declared bytes in blocks first, so that
      // memory follows the bytes that really arrive, not what the header claims.
      std::string body;
      for (uint64_t done = 0; done < total;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(total - done, uint64_t{1} << 20));
        body.resize(static_cast<size_t>(done) + n);
        in.read(&body[static_cast<size_t>(done)], static_cast<std::streamsize>(n));
        if (static_cast<size_t>(in.gcount()) != n)
          throw FormatError(source + ": state declares batch " + std::to_string(batch) + ": " +
                            std::to_string(total) + " bytes of positions and state, but the " +
                            "stream ended after " + std::to_string(done + in.gcount()) +
                            " (truncated or corrupt)");
        done += n;
      }
      struct View : std::streambuf {  // reads `body` in place (istringstream would copy it)
        View(char* p, size_t n) { setg(p, p, p + n); }
      } view(&body[0], body.size());
      std::istream known(&view);
      return read_body(known, dims, source);
    }
    return read_body(in, dims, source);
  }

 private:
  // Positions and data, once the header has been checked and `in` is known to hold them.
  static ModelState read_body(std::istream& in, const uint64_t (&dims)[5],
                              const std::string& source) {
    const uint64_t batch = dims[1];
    ModelState s;
    s.positions.resize(static_cast<size_t>(batch));
    for (uint64_t b = 0; b < batch; ++b) {
      const auto p = get<int64_t>(in, source);
      if (p < 0 || p > kMaxPosition)
        throw FormatError(source + ": state position " + std::to_string(p) + " of batch entry " +
                          std::to_string(b) + " is outside [0, 2^40]");
      s.positions[b] = p;
    }
    s.layers.reserve(static_cast<size_t>(dims[0]));  // checked against the model above
    for (uint64_t l = 0; l < dims[0]; ++l) {
      RetentionState<Scalar> t{Index(dims[1]), Index(dims[2]), Index(dims[3]), Index(dims[4])};
      in.read(reinterpret_cast<char*>(t.data()), std::streamsize(t.size() * sizeof(Scalar)));
      if (!in) throw FormatError(source + ": truncated state data in layer " + std::to_string(l));
      for (Index i = 0; i < t.size(); ++i)
        if (!std::isfinite(t.data()[i]))
          throw FormatError(source + ": state value " + std::to_string(i) + " of layer " +
                            std::to_string(l) + " is not finite: expected finite values");
      s.layers.push_back(std::move(t));
    }
    return s;
  }

  // Bytes between the read position and the end of `in`, or -1 when the stream cannot tell
  // (not seekable). Leaves the position where it was.
  static int64_t bytes_left(std::istream& in) {
    const std::istream::pos_type here = in.tellg();
    if (here == std::istream::pos_type(-1)) return -1;
    in.seekg(0, std::ios::end);
    const std::istream::pos_type end = in.tellg();
    in.seekg(here);
    if (end == std::istream::pos_type(-1) || !in) {
      in.clear();
      in.seekg(here);
      return -1;
    }
    return static_cast<int64_t>(end - here);
  }
  static std::string bytes_string(uint64_t count, uint64_t each) {
    const long double bytes = static_cast<long double>(count) * each;
    char text[64];
    std::snprintf(text, sizeof text, "%.1Lf GiB", bytes / (1024.0L * 1024 * 1024));
    return text;
  }
  static std::string hex(uint64_t v) {
    char text[24];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
    return text;
  }
  template <typename T>
  static void put(std::ostream& out, T v) {
    out.write(reinterpret_cast<const char*>(&v), sizeof(T));  // the library assumes little-endian
  }
  template <typename T>
  static T get(std::istream& in, const std::string& source) {
    T v{};
    in.read(reinterpret_cast<char*>(&v), sizeof(T));
    if (!in) throw FormatError(source + ": truncated state header");
    return v;
  }
};

/// Throws FormatError "SOURCE: N trailing bytes after the state" unless `in` is at its end. A
/// state file holds one state: a reader calls this after the last field it reads (ModelState's,
/// or those a wrapper such as GenerationState appends).
inline void expect_end_of_state(std::istream& in, const std::string& source = "state") {
  if (in.peek() == std::char_traits<char>::eof()) {
    in.clear();
    return;
  }
  std::streamoff extra = 0;
  const std::istream::pos_type here = in.tellg();
  if (here != std::istream::pos_type(-1)) {
    in.seekg(0, std::ios::end);
    extra = in.tellg() - here;
    in.seekg(here);
  }
  throw FormatError(source + ": " + (extra > 0 ? std::to_string(extra) : std::string("some")) +
                    " trailing bytes after the state: expected the end of the file");
}

namespace detail {

inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <typename T>
uint64_t fnv1a_value(uint64_t h, T v) {
  return fnv1a(h, &v, sizeof v);
}

template <typename Scalar>
float weight_at(const LinearWeight<Scalar>& w, Index r, Index c) {
  return static_cast<float>(w.at(r, c));
}
template <typename T>
float weight_at(const T& m, Index r, Index c) {
  return static_cast<float>(m(r, c));
}

}  // namespace detail

/// Values sampled from each tensor by model_fingerprint().
constexpr Index kFingerprintSamples = 1024;

/// A 64-bit fingerprint of a model, stored in its state files (never 0, the value of "none").
/// It hashes (FNV-1a, then a 64-bit mixer) the config as JSON and, for every tensor in
/// checkpoint order, its name, shape and up to kFingerprintSamples values at evenly spaced
/// positions (as float, so a float and a double copy of one checkpoint agree). Cheap: a few
/// thousand values a tensor whatever the model size, so it is computed on every save and load.
/// Two checkpoints trained or fine-tuned apart differ in essentially every value and so in the
/// fingerprint; an edit confined to values between the samples is not seen. A guard against
/// using a state with the wrong model, not a cryptographic hash.
template <typename Scalar>
uint64_t model_fingerprint(const ModelConfig& config, const ModelWeights<Scalar>& weights) {
  uint64_t h = 0xcbf29ce484222325ull;
  const std::string tag = "retnet model fingerprint 1";
  h = detail::fnv1a(h, tag.data(), tag.size());
  const std::string json = config.to_json().dump();
  h = detail::fnv1a(h, json.data(), json.size());
  auto tensor = [&](const std::string& name, const auto& t) {
    const Index rows = t.rows(), cols = t.cols(), n = rows * cols;
    h = detail::fnv1a(h, name.data(), name.size() + 1);  // with the terminating NUL
    h = detail::fnv1a_value<int64_t>(h, rows);
    h = detail::fnv1a_value<int64_t>(h, cols);
    const Index k = std::min<Index>(n, kFingerprintSamples);
    for (Index j = 0; j < k; ++j) {
      const Index i = static_cast<Index>(static_cast<long double>(n) * j / k);
      h = detail::fnv1a_value<float>(h, detail::weight_at(t, i / cols, i % cols));
    }
  };
  weights.visit(config, [&](const std::string& name, const auto& t, const std::vector<int64_t>&) {
    tensor(name, t);
  });
  if (weights.embed.size() && config.tie_embeddings)
    tensor("embed_tokens.weight (apart)", weights.embed);
  // splitmix64's finaliser, so that similar models do not get similar fingerprints.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

}  // namespace retnet
