// The tokenizer's ids: the token string tokenizer.json gives each (model vocabulary and added
// tokens), whether an id is a token at all (ids may have gaps), and whether it is special.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace retnet::detail::hf {

struct TokenIndex {
  std::vector<std::string> text;  // by id
  std::vector<uint8_t> present;   // by id: some token has this id
  std::vector<uint8_t> special;   // by id: an added token marked special

  size_t size() const { return text.size(); }
  bool has(int64_t id) const { return id >= 0 && size_t(id) < text.size() && present[size_t(id)]; }
  bool is_special(int64_t id) const { return has(id) && special[size_t(id)]; }

  /// Makes room for ids below `n`.
  void grow(size_t n) {
    if (n <= text.size()) return;
    text.resize(n);
    present.resize(n, 0);
    special.resize(n, 0);
  }
};

}  // namespace retnet::detail::hf
