// The recurrent state of a whole model: one retention state per layer plus the number of
// tokens each batch entry has consumed (positions drive the rotation and decay factors).
// A value type: fixed size whatever the sequence length, copyable (to branch a generation),
// and serialisable with a version and shape check.
#pragma once

#include <cstdint>
#include <cstring>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "retnet/kernels/retention_common.hpp"

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

  // Stream format, little-endian: "RETNETST", u32 version, u32 sizeof(Scalar), u64 layers,
  // u64 batch, u64 heads, u64 dk, u64 columns, i64 positions[batch], Scalar data[...].
  static constexpr uint32_t kVersion = 1;

  void save(std::ostream& out) const {
    RETNET_REQUIRE(!layers.empty(), "ModelState::save: empty state");
    const auto& d = layers[0].dimensions();
    out.write("RETNETST", 8);
    put<uint32_t>(out, kVersion);
    put<uint32_t>(out, sizeof(Scalar));
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
  /// same layers, heads, dk and columns; the batch may differ.
  static ModelState load(std::istream& in, const ModelState& expected,
                         const std::string& source = "state") {
    char magic[8] = {};
    in.read(magic, 8);
    if (!in || std::memcmp(magic, "RETNETST", 8) != 0)
      throw FormatError(source + ": not a retnet state file (bad magic)");
    const auto version = get<uint32_t>(in, source);
    if (version != kVersion)
      throw FormatError(source + ": state version " + std::to_string(version) + ", expected " +
                        std::to_string(kVersion));
    const auto scalar = get<uint32_t>(in, source);
    if (scalar != sizeof(Scalar))
      throw FormatError(source + ": state scalar size " + std::to_string(scalar) +
                        " bytes, expected " + std::to_string(sizeof(Scalar)));
    uint64_t dims[5];
    for (auto& v : dims) v = get<uint64_t>(in, source);
    const auto& e = expected.layers.at(0).dimensions();
    const uint64_t want[5] = {uint64_t(expected.layers.size()), dims[1], uint64_t(e[1]),
                              uint64_t(e[2]), uint64_t(e[3])};
    const char* names[5] = {"layers", "batch", "heads", "dk", "columns"};
    for (int i = 0; i < 5; ++i)
      if (dims[i] != want[i])
        throw FormatError(source + ": state has " + names[i] + " = " + std::to_string(dims[i]) +
                          ", the model expects " + std::to_string(want[i]));
    if (dims[1] == 0 || dims[1] > (uint64_t(1) << 20))
      throw FormatError(source + ": state batch " + std::to_string(dims[1]) + " is out of range");
    ModelState s;
    for (uint64_t b = 0; b < dims[1]; ++b) {
      s.positions.push_back(get<int64_t>(in, source));
      if (s.positions.back() < 0) throw FormatError(source + ": negative position");
    }
    s.layers.reserve(static_cast<size_t>(dims[0]));  // checked against the model above
    for (uint64_t l = 0; l < dims[0]; ++l) {
      RetentionState<Scalar> t{Index(dims[1]), Index(dims[2]), Index(dims[3]), Index(dims[4])};
      in.read(reinterpret_cast<char*>(t.data()), std::streamsize(t.size() * sizeof(Scalar)));
      if (!in) throw FormatError(source + ": truncated state data in layer " + std::to_string(l));
      s.layers.push_back(std::move(t));
    }
    return s;
  }

 private:
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

}  // namespace retnet
