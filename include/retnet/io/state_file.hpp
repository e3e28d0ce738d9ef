// State files (docs/FORMATS.md, "State files"): a ModelState, or a GenerationState (a model
// state, the pending token and the recent tokens), with a version, shape and size check, the
// fingerprint of its model (model_fingerprint), so that it cannot be loaded into another model
// of the same shapes, and a CRC-32 over every byte, so that a damaged file (a position moved, a
// value scaled, another pending token: each still in range) is refused rather than continued
// from. The file is untrusted: every header field is checked before anything is allocated,
// memory follows the bytes that really arrive, and nothing read is used before its checksum
// matches.
//
// Stream format, little-endian:
//   "RETNETST" | u32 version (3) | u32 bytes per value | u64 model fingerprint |
//   u64 layers | u64 batch | u64 heads | u64 dk | u64 columns |
//   i64 positions[batch] | value data[layers][batch][heads][dk][columns] |
//   u32 CRC-32 of every byte before it
// and, for a generation: i32 pending | u64 n | i32 recent[n] | u32 CRC-32 of these three.
// The values are the Scalar's own (bytes per value = sizeof(Scalar)) or, for a float state
// saved with StatePrecision::kBFloat16, bfloat16 (2 bytes, rounded to nearest even; read back
// widened to float): half the bytes, at bfloat16's precision. Versions 1 (no fingerprint) and 2
// (no checksum) are refused.
#pragma once

#include <algorithm>
#include <boost/crc.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <istream>
#include <ostream>
#include <streambuf>
#include <string>
#include <type_traits>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/model/retnet_model.hpp"
#include "retnet/model/state.hpp"

namespace retnet {

constexpr uint32_t kStateVersion = 3;
/// Bytes before the positions.
constexpr uint64_t kStateHeaderBytes = 8 + 4 + 4 + 8 + 5 * 8;
/// Bytes of the CRC-32 that ends the model state (and the fields of a generation).
constexpr uint64_t kStateChecksumBytes = 4;
/// Largest state load_state() accepts: positions and data together, checked from the header
/// before anything is allocated (a 7B-parameter RetNet holds about 0.3 GB per sequence).
constexpr uint64_t kMaxStateBytes = uint64_t{16} << 30;
/// Largest position (tokens consumed) save_state() writes and load_state() accepts: 2^40, far
/// beyond any sequence, and small enough that position arithmetic never overflows.
constexpr int64_t kMaxStatePosition = int64_t{1} << 40;
/// Most recent tokens a generation state holds.
constexpr uint64_t kMaxStateTokens = uint64_t{1} << 24;

namespace detail {

/// The checksum of state files: CRC-32 (the polynomial of zlib and PNG), from Boost.CRC.
using StateCrc = boost::crc_32_type;

/// The CRC-32 of `size` bytes at `data`, as a state file stores it.
inline uint32_t state_crc32(const void* data, size_t size) {
  StateCrc crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

// Writes bytes and adds them to the checksum that save_state / save_generation_state end with.
struct ChecksummedWriter {
  explicit ChecksummedWriter(std::ostream& stream) : out(stream) {}

  std::ostream& out;
  StateCrc crc;

  void write(const void* data, size_t size) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    crc.process_bytes(data, size);
  }
  template <typename T>
  void put(T v) {
    write(&v, sizeof(T));  // the library assumes little-endian
  }
  void write_checksum() {
    const uint32_t sum = crc.checksum();
    out.write(reinterpret_cast<const char*>(&sum), sizeof sum);
  }
};

// Reads `size` bytes into `dst` and adds them to `crc`; false when the stream ends first.
inline bool read_checksummed(std::istream& in, void* dst, size_t size, StateCrc& crc) {
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(size));
  if (!in) return false;
  crc.process_bytes(dst, size);
  return true;
}

template <typename T>
T get_raw(std::istream& in, const std::string& source, StateCrc& crc) {
  T v{};
  if (!read_checksummed(in, &v, sizeof(T), crc))
    throw FormatError(source + ": truncated state header");
  return v;
}

// Reads the stored CRC-32 that ends `what` and compares it with `crc`, the bytes read so far.
inline void check_state_checksum(std::istream& in, const StateCrc& crc, const std::string& source,
                                 const std::string& what) {
  uint32_t stored = 0;
  in.read(reinterpret_cast<char*>(&stored), sizeof stored);
  if (!in) throw FormatError(source + ": truncated " + what + ": its checksum is missing");
  if (stored != crc.checksum()) {
    char text[96];
    std::snprintf(text, sizeof text, " (CRC-32 stored %08x, computed %08x)", unsigned(stored),
                  unsigned(crc.checksum()));
    throw FormatError(source + ": checksum mismatch in the " + what + text +
                      ": the file is damaged");
  }
}

// Bytes between the read position and the end of `in`, or -1 when the stream cannot tell
// (not seekable). Leaves the position where it was.
inline int64_t bytes_left(std::istream& in) {
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

inline std::string gib_string(uint64_t count, uint64_t each) {
  const long double bytes = static_cast<long double>(count) * each;
  char text[64];
  std::snprintf(text, sizeof text, "%.1Lf GiB", bytes / (1024.0L * 1024 * 1024));
  return text;
}

inline std::string hex_string(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

/// The header of a state file: magic, version, bytes per value, fingerprint and the five dims
/// (layers, batch, heads, dk, columns), checked against `expected` but for the batch.
struct StateHeader {
  uint32_t value_bytes = 0;  // sizeof(Scalar), or 2: bfloat16 values of a float state
  uint64_t fingerprint = 0;
  uint64_t dims[5] = {};
};

/// Whether a state of Scalar may hold values of `bytes` bytes: its own, or bfloat16 for float.
template <typename Scalar>
bool readable_value_size(uint32_t bytes) {
  return bytes == sizeof(Scalar) || (std::is_same_v<Scalar, float> && bytes == 2);
}

template <typename Scalar>
StateHeader read_state_header(std::istream& in, const ModelState<Scalar>& expected,
                              const std::string& source, StateCrc& crc) {
  char magic[8] = {};
  if (!read_checksummed(in, magic, 8, crc) || std::memcmp(magic, "RETNETST", 8) != 0)
    throw FormatError(source + ": not a retnet state file (bad magic)");
  const auto version = get_raw<uint32_t>(in, source, crc);
  const char* missing = version == 1 ? "a model fingerprint" : "a checksum";
  if (version == 1 || version == 2)
    throw FormatError(source + ": state version " + std::to_string(version) + " (saved without " +
                      missing + "), expected " + std::to_string(kStateVersion) +
                      ": save the state again");
  if (version != kStateVersion)
    throw FormatError(source + ": state version " + std::to_string(version) + ", expected " +
                      std::to_string(kStateVersion));
  const auto scalar = get_raw<uint32_t>(in, source, crc);
  if (!readable_value_size<Scalar>(scalar))
    throw FormatError(source + ": state scalar size " + std::to_string(scalar) +
                      " bytes, expected " + std::to_string(sizeof(Scalar)) +
                      (std::is_same_v<Scalar, float> ? " (or 2: bfloat16)" : ""));
  StateHeader h;
  h.value_bytes = scalar;
  h.fingerprint = get_raw<uint64_t>(in, source, crc);
  for (auto& v : h.dims) v = get_raw<uint64_t>(in, source, crc);
  RETNET_REQUIRE(!expected.layers.empty(), "load_state: empty expected state");
  const auto& e = expected.layers[0].dimensions();
  const uint64_t want[5] = {uint64_t(expected.layers.size()), h.dims[1], uint64_t(e[1]),
                            uint64_t(e[2]), uint64_t(e[3])};
  const char* names[5] = {"layers", "batch", "heads", "dk", "columns"};
  for (int i = 0; i < 5; ++i)
    if (h.dims[i] != want[i])
      throw FormatError(source + ": state has " + names[i] + " = " + std::to_string(h.dims[i]) +
                        ", the model expects " + std::to_string(want[i]));
  return h;
}

// Positions, data and checksum, once the header (whose bytes `crc` holds) has been checked and
// `in` is known to hold them. The values are checked once the checksum matches.
/// Reads `t`'s values as stored: the Scalar's own bytes, or bfloat16 widened to float.
template <typename Scalar>
bool read_values(std::istream& in, RetentionState<Scalar>& t, uint32_t value_bytes, StateCrc& crc) {
  if (value_bytes == sizeof(Scalar))
    return read_checksummed(in, t.data(), size_t(t.size()) * sizeof(Scalar), crc);
  if constexpr (std::is_same_v<Scalar, float>) {
    uint16_t block[4096];
    for (Index done = 0; done < t.size();) {
      const Index n = std::min<Index>(t.size() - done, 4096);
      if (!read_checksummed(in, block, size_t(n) * 2, crc)) return false;
      for (Index i = 0; i < n; ++i) t.data()[done + i] = bf16_to_float(block[i]);
      done += n;
    }
    return true;
  }
  return false;
}

template <typename Scalar>
ModelState<Scalar> read_state_body(std::istream& in, const uint64_t (&dims)[5],
                                   uint32_t value_bytes, const std::string& source, StateCrc& crc) {
  const uint64_t batch = dims[1];
  ModelState<Scalar> s;
  s.positions.resize(static_cast<size_t>(batch));
  if (!read_checksummed(in, s.positions.data(), s.positions.size() * sizeof(int64_t), crc))
    throw FormatError(source + ": truncated state positions");
  s.layers.reserve(static_cast<size_t>(dims[0]));  // checked against the model
  for (uint64_t l = 0; l < dims[0]; ++l) {
    RetentionState<Scalar> t{Index(dims[1]), Index(dims[2]), Index(dims[3]), Index(dims[4])};
    if (!read_values(in, t, value_bytes, crc))
      throw FormatError(source + ": truncated state data in layer " + std::to_string(l));
    s.layers.push_back(std::move(t));
  }
  check_state_checksum(in, crc, source, "state");
  for (uint64_t b = 0; b < batch; ++b)
    if (s.positions[b] < 0 || s.positions[b] > kMaxStatePosition)
      throw FormatError(source + ": state position " + std::to_string(s.positions[b]) +
                        " of batch entry " + std::to_string(b) + " is outside [0, 2^40]");
  for (size_t l = 0; l < s.layers.size(); ++l)
    for (Index i = 0; i < s.layers[l].size(); ++i)
      if (!std::isfinite(s.layers[l].data()[i]))
        throw FormatError(source + ": state value " + std::to_string(i) + " of layer " +
                          std::to_string(l) + " is not finite: expected finite values");
  return s;
}

// The body of a stream of unknown length (a pipe): the declared `total` bytes (positions, data
// and checksum) taken in blocks first, so that memory follows the bytes that really arrive, not
// what the header claims.
template <typename Scalar>
ModelState<Scalar> read_state_body_from_pipe(std::istream& in, const uint64_t (&dims)[5],
                                             uint32_t value_bytes, uint64_t total,
                                             const std::string& source, StateCrc& crc) {
  std::string body;
  for (uint64_t done = 0; done < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(total - done, uint64_t{1} << 20));
    body.resize(static_cast<size_t>(done) + n);
    in.read(&body[static_cast<size_t>(done)], static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in.gcount()) != n)
      throw FormatError(
          source + ": state declares batch " + std::to_string(dims[1]) + ": " +
          std::to_string(total) + " bytes of positions, state and checksum, but the " +
          "stream ended after " + std::to_string(done + in.gcount()) + " (truncated or corrupt)");
    done += n;
  }
  struct View : std::streambuf {  // reads `body` in place (istringstream would copy it)
    View(char* p, size_t n) { setg(p, p, p + n); }
  } view(&body[0], body.size());
  std::istream known(&view);
  return read_state_body<Scalar>(known, dims, value_bytes, source, crc);
}

}  // namespace detail

/// How a state's values are stored: as they are, or (a float state) rounded to bfloat16.
enum class StatePrecision { kNative, kBFloat16 };

/// Writes `state` with `fingerprint`, the model_fingerprint() of the model it belongs to;
/// load_state() refuses it for any other model. A state that defers its fold is written folded
/// (ModelState::folded()): a file holds the plain recurrence's state, whatever made it.
template <typename Scalar>
void save_state(std::ostream& out, const ModelState<Scalar>& state, uint64_t fingerprint,
                StatePrecision precision = StatePrecision::kNative) {
  if (state.defers_fold()) return save_state(out, state.folded(), fingerprint, precision);
  const bool bf16 = precision == StatePrecision::kBFloat16;
  constexpr bool is_float = std::is_same_v<Scalar, float>;
  RETNET_REQUIRE(!bf16 || is_float, "save_state: bfloat16 values are for float states");
  RETNET_REQUIRE(!state.layers.empty(), "save_state: empty state");
  const auto& d = state.layers[0].dimensions();
  RETNET_REQUIRE(static_cast<Index>(state.positions.size()) == d[0] && d[0] > 0,
                 "save_state: " + std::to_string(state.positions.size()) +
                     " positions for a state of batch " + std::to_string(d[0]));
  for (const auto& s : state.layers)
    RETNET_REQUIRE(s.dimensions() == d, "save_state: layers of different shapes");
  for (int64_t p : state.positions)
    RETNET_REQUIRE(p >= 0 && p <= kMaxStatePosition,
                   "save_state: position " + std::to_string(p) + " outside [0, 2^40]");
  detail::ChecksummedWriter w(out);
  w.write("RETNETST", 8);
  w.put<uint32_t>(kStateVersion);
  w.put<uint32_t>(bf16 ? 2 : sizeof(Scalar));
  w.put<uint64_t>(fingerprint);
  for (uint64_t v : {uint64_t(state.layers.size()), uint64_t(d[0]), uint64_t(d[1]), uint64_t(d[2]),
                     uint64_t(d[3])})
    w.put<uint64_t>(v);
  w.write(state.positions.data(), state.positions.size() * sizeof(int64_t));
  for (const auto& s : state.layers) {
    if (!bf16) {
      w.write(s.data(), size_t(s.size()) * sizeof(Scalar));
      continue;
    }
    uint16_t block[4096];
    for (Index done = 0; done < s.size();) {
      const Index n = std::min<Index>(s.size() - done, 4096);
      for (Index i = 0; i < n; ++i)
        block[i] = float_to_bf16(static_cast<float>(s.data()[done + i]));
      w.write(block, size_t(n) * 2);
      done += n;
    }
  }
  w.write_checksum();
  if (!out) throw Error("save_state: write failed");
}

/// Reads a state saved by save_state and checks it against `expected` (e.g.
/// model.new_state(1)): same layers, heads, dk and columns (the batch may differ), saved with
/// `fingerprint` (that of the model it is loaded into). Every header field is validated before
/// anything is allocated: the size the header declares must be at most kMaxStateBytes and, when
/// the stream can tell, no more than the bytes that follow; positions lie in
/// [0, kMaxStatePosition] and every value is finite, all checked once the CRC-32 of the whole
/// state matches ("checksum mismatch" otherwise). Reads exactly the state: a caller that reads
/// nothing after it should call expect_end_of_state(). Throws FormatError "SOURCE: ..." naming
/// the field.
template <typename Scalar>
ModelState<Scalar> load_state(std::istream& in, const ModelState<Scalar>& expected,
                              uint64_t fingerprint, const std::string& source = "state") {
  detail::StateCrc crc;
  const detail::StateHeader h = detail::read_state_header(in, expected, source, crc);
  // The size the header declares, checked before it is allocated or read.
  const uint64_t batch = h.dims[1];
  if (batch == 0) throw FormatError(source + ": state batch 0, expected at least 1");
  uint64_t per_entry = sizeof(int64_t), layer_entry = h.value_bytes;  // bytes per batch entry
  for (int i = 2; i < 5; ++i) layer_entry *= h.dims[i];  // each matches the model: no overflow
  per_entry += layer_entry * h.dims[0];
  const uint64_t total = per_entry * batch;
  if (batch > kMaxStateBytes / per_entry)
    throw FormatError(source + ": state declares batch " + std::to_string(batch) + ": " +
                      detail::gib_string(batch, per_entry) + " of positions and state, more " +
                      "than the limit of " + std::to_string(kMaxStateBytes >> 30) + " GiB");
  const int64_t left = detail::bytes_left(in);
  if (left >= 0 && static_cast<uint64_t>(left) < total + kStateChecksumBytes)
    throw FormatError(source + ": state declares batch " + std::to_string(batch) + ": " +
                      std::to_string(total) + " bytes of positions and state and a " +
                      std::to_string(kStateChecksumBytes) + "-byte checksum, but only " +
                      std::to_string(left) + " bytes follow the header (truncated or corrupt)");
  if (h.fingerprint != fingerprint)
    throw FormatError(source + ": state was saved for another model (model fingerprint " +
                      detail::hex_string(h.fingerprint) + ", this model's is " +
                      detail::hex_string(fingerprint) +
                      "): expected a state saved with this model");
  if (left < 0)
    return detail::read_state_body_from_pipe<Scalar>(in, h.dims, h.value_bytes,
                                                     total + kStateChecksumBytes, source, crc);
  return detail::read_state_body<Scalar>(in, h.dims, h.value_bytes, source, crc);
}

/// Throws FormatError "SOURCE: N trailing bytes after the state" unless `in` is at its end. A
/// state file holds one state: a reader calls this after the last field it reads.
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

/// Writes a generation for the model whose fingerprint() is given.
template <typename Scalar>
void save_generation_state(std::ostream& out, const GenerationState<Scalar>& g,
                           uint64_t fingerprint,
                           StatePrecision precision = StatePrecision::kNative) {
  save_state(out, g.model, fingerprint, precision);
  detail::ChecksummedWriter w(out);
  w.put<int32_t>(g.pending);
  w.put<uint64_t>(g.recent.size());
  w.write(g.recent.data(), g.recent.size() * sizeof(int32_t));
  w.write_checksum();
  if (!out) throw Error("save_generation_state: write failed");
}

/// Reads a generation saved for `model`: refuses another model's state, any header field out
/// of range, a checksum mismatch (of the model state, or of the generation's own fields) and
/// trailing bytes. Memory follows the bytes that actually arrive.
template <typename Scalar>
GenerationState<Scalar> load_generation_state(std::istream& in, const RetNetModel<Scalar>& model,
                                              const std::string& source = "state") {
  const auto require = [](bool ok, const std::string& message) {
    if (!ok) throw FormatError(message);
  };
  GenerationState<Scalar> g;
  g.model = load_state(in, model.new_state(1), model.fingerprint(), source);
  require(g.model.batch() == 1, source + ": a generation state holds one sequence");
  uint64_t n = 0;
  detail::StateCrc crc;
  const bool counted = detail::read_checksummed(in, &g.pending, sizeof g.pending, crc) &&
                       detail::read_checksummed(in, &n, sizeof n, crc);
  require(counted, source + ": truncated generation state");
  require(n <= kMaxStateTokens, source + ": generation state declares " + std::to_string(n) +
                                    " recent tokens, more than the limit of " +
                                    std::to_string(kMaxStateTokens));
  constexpr uint64_t kBlock = 1 << 16;  // tokens read at a time
  for (uint64_t done = 0; done < n;) {
    const uint64_t k = std::min(kBlock, n - done);
    g.recent.resize(done + k);
    require(detail::read_checksummed(in, g.recent.data() + done, k * sizeof(int32_t), crc),
            source + ": truncated generation state");
    done += k;
  }
  detail::check_state_checksum(in, crc, source, "generation fields");
  expect_end_of_state(in, source);
  const auto vocab = model.config().vocab_size;
  require(g.pending >= 0 && g.pending < vocab, source + ": pending token out of range");
  for (int32_t t : g.recent) require(t >= 0 && t < vocab, source + ": token out of range");
  return g;
}

}  // namespace retnet
