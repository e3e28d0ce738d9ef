// Hash tables of the BPE model: byte strings to ids (the vocabulary, the word caches) and
// pairs of ids to merges. Open addressing, lookups that allocate nothing, and prefetching, so
// that the many lookups of loading and encoding wait on memory together.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace retnet::detail::hf {

inline void prefetch_address(const void* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix64(h ^ v) + 0x632BE59BD9B4E019ull;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return mix64(h ^ v ^ (uint64_t(n) << 59));
}

/// Open-addressing map from byte strings to int64 values; lookups take a string_view and
/// allocate nothing. Keys of up to 8 bytes are kept in the slot itself (most tokens: a lookup
/// then touches one cache line), longer ones in one shared buffer.
class StringTable {
 public:
  StringTable() { rehash(16); }

  const int64_t* find(std::string_view key) const { return find(key, hash_bytes(key)); }

  /// find with the key's hash_bytes computed already; prefetch(h) beforehand hides the
  /// memory latency when many lookups are made in a row.
  void prefetch(uint64_t h) const { prefetch_address(&slots_[h & mask_]); }
  const int64_t* find(std::string_view key, uint64_t h) const {
    const uint32_t tag = uint32_t(h >> 32) | 1;  // 0 marks an empty slot
    const uint64_t inline_key = pack(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.tag == 0) return nullptr;
      if (s.tag == tag && s.length == key.size() && same(s, key, inline_key)) return &s.value;
    }
  }

  /// Inserts or overwrites.
  void assign(std::string_view key, int64_t value) { *slot_for(key) = value; }

  /// Inserts unless present; returns whether it did.
  bool insert(std::string_view key, int64_t value) {
    const size_t before = size_;
    int64_t* v = slot_for(key);
    if (size_ == before) return false;
    *v = value;
    return true;
  }

  void reserve(size_t n) {
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t tag = 0;
    uint32_t length = 0;
    uint64_t data = 0;  // the key's bytes if it has up to 8, else its offset in keys_
    int64_t value = 0;
  };

  static uint64_t pack(std::string_view key) {
    uint64_t v = 0;
    if (key.size() <= 8) std::memcpy(&v, key.data(), key.size());
    return v;
  }
  bool same(const Slot& s, std::string_view key, uint64_t inline_key) const {
    return key.size() <= 8 ? s.data == inline_key
                           : std::memcmp(keys_.data() + s.data, key.data(), key.size()) == 0;
  }

  int64_t* slot_for(std::string_view key) {
    if (key.size() > std::numeric_limits<uint32_t>::max()) throw std::length_error("key too long");
    if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
    const uint64_t h = hash_bytes(key);
    const uint32_t tag = uint32_t(h >> 32) | 1;
    const uint64_t inline_key = pack(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.tag == 0) {
        s.tag = tag;
        s.length = uint32_t(key.size());
        if (key.size() <= 8) {
          s.data = inline_key;
        } else {
          s.data = keys_.size();
          keys_.append(key.data(), key.size());
        }
        ++size_;
        return &s.value;
      }
      if (s.tag == tag && s.length == key.size() && same(s, key, inline_key)) return &s.value;
    }
  }

  void rehash(size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot());
    mask_ = n - 1;
    for (const Slot& s : old) {
      if (s.tag == 0) continue;
      const std::string_view key =
          s.length <= 8 ? std::string_view(reinterpret_cast<const char*>(&s.data), s.length)
                        : std::string_view(keys_.data() + s.data, s.length);
      size_t i = hash_bytes(key) & mask_;
      while (slots_[i].tag != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string keys_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

/// Open-addressing map from a pair of token ids to a merge (rank, id of the merged token).
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };

  MergeTable() { rehash(16); }

  const Merge* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

  void prefetch(int32_t a, int32_t b) const {
    prefetch_address(&slots_[mix64(pack(a, b)) & mask_]);
  }

  /// Inserts or overwrites (a later duplicate of a merge wins, as in Hugging Face's map).
  void assign(int32_t a, int32_t b, Merge m) {
    if (4 * (size_ + 1) > 3 * slots_.size()) rehash(2 * slots_.size());
    const uint64_t key = pack(a, b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) {
        s.merge = m;
        return;
      }
      if (s.key == kEmpty) {
        s.key = key;
        s.merge = m;
        ++size_;
        return;
      }
    }
  }

  void reserve(size_t n) {
    size_t want = 16;
    while (3 * want < 4 * n) want *= 2;
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: never a real key
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{0, 0};
  };
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  void rehash(size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot());
    mask_ = n - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = mix64(s.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

}  // namespace retnet::detail::hf
