// libFuzzer target: treats the input as a state file of a small model (2 layers, 2 heads,
// dk 4, 5 columns, float, fingerprint kFingerprint) and loads it as a whole file, once from a
// seekable stream and once from a stream that cannot seek (a pipe), so both size checks run.
// Each input is loaded as it is and once more with its last 4 bytes replaced by the CRC-32 of
// the bytes before them, so that mutations reach the checks behind the checksum too.
// Only retnet::Error may escape; a crash, a sanitizer report (including allocating more than
// libFuzzer's memory limit), another exception or a broken invariant is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <streambuf>
#include <string>

#include "retnet/core/error.hpp"
#include "retnet/io/state_file.hpp"

namespace {

constexpr uint64_t kFingerprint = 0x0123456789abcdefull;  // as in fuzz/make_seeds.py

class UnseekableBuffer : public std::streambuf {
 public:
  UnseekableBuffer(const char* data, size_t size) {
    char* p = const_cast<char*>(data);  // read only: the get area is never written
    setg(p, p, p + size);
  }
};

const retnet::ModelState<float>& expected() {
  static const retnet::ModelState<float> state = [] {
    retnet::ModelState<float> s;
    s.positions = {0};
    for (int l = 0; l < 2; ++l) {
      retnet::RetentionState<float> t(1, 2, 4, 5);
      t.setZero();
      s.layers.push_back(t);
    }
    return s;
  }();
  return state;
}

void load(std::istream& in) {
  try {
    const auto s = retnet::load_state(in, expected(), kFingerprint, "fuzz-state");
    retnet::expect_end_of_state(in, "fuzz-state");
    // An accepted state matches the model and holds only valid positions.
    if (s.batch() < 1 || s.layers.size() != 2) std::abort();
    for (const auto& t : s.layers)
      if (t.dimension(0) != s.batch() || t.dimension(1) != 2 || t.dimension(2) != 4 ||
          t.dimension(3) != 5)
        std::abort();
    for (int64_t p : s.positions)
      if (p < 0 || p > retnet::kMaxStatePosition) std::abort();
  } catch (const retnet::Error& e) {
    const std::string message = e.what();
    if (message.find('\n') != std::string::npos || message.size() > 1000) std::abort();
  }
}

void load_both_ways(const std::string& bytes) {
  std::istringstream seekable(bytes);
  load(seekable);
  UnseekableBuffer buffer(bytes.data(), bytes.size());
  std::istream pipe(&buffer);
  load(pipe);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  load_both_ways(bytes);
  if (size >= retnet::kStateChecksumBytes) {
    const size_t end = size - retnet::kStateChecksumBytes;
    const uint32_t crc = retnet::detail::state_crc32(bytes.data(), end);
    std::memcpy(&bytes[end], &crc, sizeof crc);
    load_both_ways(bytes);
  }
  return 0;
}
