// Leftmost-longest search for a set of byte strings, in time linear in the text and memory
// linear in the strings: the matches the aho-corasick crate's find_iter reports with
// MatchKind::LeftmostLongest (Hugging Face's added tokens use it).
//
// An Aho-Corasick automaton over the reversed strings, run from right to left over the text,
// gives the longest string that starts at each position; the matches are then taken from left
// to right, each search going on at the end of the previous match. The automaton's nodes are
// the trie of the reversed strings in preorder (a node's first child is the next node, its
// siblings are linked in byte order), 13 bytes each, at most one per byte of the strings.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace retnet::detail::hf {

class LeftmostLongestMatcher {
 public:
  LeftmostLongestMatcher() { root_.fill(0); }

  /// Pattern i is patterns[i] (the views need not outlive the constructor). Empty patterns
  /// never match; of equal patterns, the first is reported.
  explicit LeftmostLongestMatcher(const std::vector<std::string_view>& patterns) {
    root_.fill(0);
    build_trie(patterns);
    build_failure_links();
  }

  bool empty() const { return max_length_ == 0; }
  /// Trie nodes, the root included: memory is node_count() * 13 bytes.
  size_t node_count() const { return label_.size(); }

  /// Calls on_match(begin, end, pattern) for the leftmost-longest matches in `text`, from left
  /// to right: the match starting first, the longest of those starting there; the next search
  /// starts at its end.
  template <typename OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const {
    if (empty()) return;
    // Blocks of at least the longest pattern keep the right-to-left runs linear: each block
    // reads at most max_length_ - 1 bytes beyond its end.
    const size_t block = std::max(kMinBlock, max_length_);
    std::vector<int32_t> longest;
    size_t p = 0;
    while (p < text.size()) {
      const size_t begin = p;
      const size_t end = begin + std::min(block, text.size() - begin);
      longest_starting_at(text, begin, end, longest);
      while (p < end) {
        const int32_t pattern = longest[p - begin];
        if (pattern < 0) {
          ++p;
          continue;
        }
        const size_t stop = p + length_[size_t(pattern)];
        on_match(p, stop, pattern);
        p = stop;
      }
    }
  }

 private:
  static constexpr size_t kMinBlock = size_t(1) << 14;
  static constexpr uint32_t kHasChild = uint32_t(1) << 31;  // in next_: the next node is a child
  static constexpr uint32_t kSibling = kHasChild - 1;       // in next_: the next sibling, or 0

  /// The trie of the reversed patterns, in preorder: sorted, each pattern adds the nodes below
  /// its common part with the one before it.
  void build_trie(const std::vector<std::string_view>& patterns) {
    std::vector<uint32_t> order;
    size_t total = 1;
    length_.assign(patterns.size(), 0);
    for (size_t i = 0; i < patterns.size(); ++i) {
      length_[i] = uint32_t(patterns[i].size());
      if (patterns[i].empty()) continue;
      order.push_back(uint32_t(i));
      total += patterns[i].size();
      max_length_ = std::max(max_length_, patterns[i].size());
    }
    if (total > kSibling || patterns.size() > size_t(std::numeric_limits<int32_t>::max()))
      throw std::length_error("LeftmostLongestMatcher: more than 2^31 pattern bytes");
    const auto reversed_less = [&](uint32_t a, uint32_t b) {
      const std::string_view x = patterns[a], y = patterns[b];
      return std::lexicographical_compare(
          x.rbegin(), x.rend(), y.rbegin(), y.rend(), [](char l, char r) {
            return static_cast<unsigned char>(l) < static_cast<unsigned char>(r);
          });
    };
    std::stable_sort(order.begin(), order.end(), reversed_less);
    label_.reserve(total);
    next_.reserve(total);
    out_.reserve(total);
    add_node(0);                    // the root
    std::vector<uint32_t> path{0};  // path[d]: the node at depth d of the previous pattern
    std::string_view previous;
    for (const uint32_t i : order) {
      const std::string_view s = patterns[i];
      size_t common = 0;
      while (common < s.size() && common < previous.size() &&
             s[s.size() - 1 - common] == previous[previous.size() - 1 - common])
        ++common;
      path.resize(std::max(path.size(), s.size() + 1));
      for (size_t d = common; d < s.size(); ++d) {
        const unsigned char c = static_cast<unsigned char>(s[s.size() - 1 - d]);
        const uint32_t node = add_node(c);
        if (d == 0)
          root_[c] = node;
        else if (d == common && common < previous.size())
          next_[path[d + 1]] |= node;  // the previous pattern's node is the previous sibling
        else
          next_[path[d]] |= kHasChild;  // the first child, created right after its parent
        path[d + 1] = node;
      }
      int32_t& out = out_[path[s.size()]];
      if (out < 0) out = int32_t(i);
      previous = s;
    }
  }

  uint32_t add_node(unsigned char c) {
    label_.push_back(c);
    next_.push_back(0);
    out_.push_back(-1);
    return uint32_t(label_.size() - 1);
  }

  /// Failure links (the longest proper suffix that is a node), breadth first, and out_ for
  /// every node: the longest pattern that is a suffix of it.
  void build_failure_links() {
    fail_.assign(label_.size(), 0);
    std::vector<uint32_t> queue;
    queue.reserve(label_.size());
    for (const uint32_t child : root_)
      if (child != 0) queue.push_back(child);
    for (size_t head = 0; head < queue.size(); ++head) {
      const uint32_t node = queue[head];
      if (!(next_[node] & kHasChild)) continue;
      for (uint32_t child = node + 1; child != 0; child = next_[child] & kSibling) {
        const uint32_t target = step(fail_[node], label_[child]);
        fail_[child] = target;
        if (out_[child] < 0) out_[child] = out_[target];
        queue.push_back(child);
      }
    }
  }

  uint32_t child_of(uint32_t node, unsigned char c) const {
    if (node == 0) return root_[c];
    if (!(next_[node] & kHasChild)) return 0;
    for (uint32_t child = node + 1; child != 0; child = next_[child] & kSibling) {
      if (label_[child] == c) return child;
      if (label_[child] > c) return 0;
    }
    return 0;
  }

  uint32_t step(uint32_t node, unsigned char c) const {
    for (;;) {
      const uint32_t next = child_of(node, c);
      if (next != 0 || node == 0) return next;
      node = fail_[node];
    }
  }

  /// longest[p - begin] for p in [begin, end): the longest pattern starting at p, or -1.
  void longest_starting_at(std::string_view text, size_t begin, size_t end,
                           std::vector<int32_t>& longest) const {
    longest.assign(end - begin, -1);
    uint32_t node = 0;
    const size_t window_end = std::min(text.size(), end - 1 + max_length_);
    for (size_t p = window_end; p > end; --p)
      node = step(node, static_cast<unsigned char>(text[p - 1]));
    for (size_t p = end; p > begin; --p) {
      node = step(node, static_cast<unsigned char>(text[p - 1]));
      longest[p - 1 - begin] = out_[node];
    }
  }

  std::array<uint32_t, 256> root_;  // the root's children by byte (0: none)
  std::vector<unsigned char> label_;
  std::vector<uint32_t> next_;  // kHasChild | the next sibling
  std::vector<uint32_t> fail_;
  std::vector<int32_t> out_;      // the longest pattern that is a suffix of the node, or -1
  std::vector<uint32_t> length_;  // by pattern
  size_t max_length_ = 0;
};

}  // namespace retnet::detail::hf
