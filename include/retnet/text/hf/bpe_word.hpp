// Encoding one pre-tokenized word with the BPE model (Hugging Face's BPE::tokenize and
// Word::merge_all): the word's characters (bytes for byte-level BPE) as symbols, then the
// merges, lowest rank first and leftmost on ties; byte fallback or unk for unknown characters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retnet/text/hf/bpe_model.hpp"
#include "retnet/text/hf/hash_tables.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

/// Encodes words with one BpeModel. Holds the scratch space of one encode call: the word
/// cache (Hugging Face keeps one per tokenizer; one per call needs no locking) and the merge
/// loop's buffers. Not for use by several threads at once; the model may be shared.
class WordEncoder {
 public:
  explicit WordEncoder(const BpeModel& model) : model_(model) {}

  /// Words longer than this are encoded kMaxWordBytes at a time, each piece as a word of its
  /// own (cut before a UTF-8 lead byte), so that the merge loop's buffers (about 50 bytes per
  /// byte of the word) stay bounded. Their ids may differ from Hugging Face's, which merges
  /// the whole word.
  static constexpr size_t kMaxWordBytes = size_t(1) << 20;

  /// Appends the ids of `word` to `out`.
  void encode(std::string_view word, std::vector<int32_t>& out) {
    const bool cacheable = word.size() <= kMaxCachedBytes;
    if (cacheable)  // the common case, kept small enough to be inlined into the caller
      if (const int64_t* v = word_cache_.find(word)) {
        append_ids(*v, out);
        return;
      }
    if (word.size() > kMaxWordBytes) {
      for (size_t begin = 0; begin < word.size();) {
        const size_t end = piece_end(word, begin);
        encode_uncached(word.substr(begin, end - begin), false, out);
        begin = end;
      }
      return;
    }
    encode_uncached(word, cacheable, out);
  }

  /// Where the piece of a long word that starts at `begin` ends: kMaxWordBytes on, moved back
  /// to the start of a UTF-8 character when one begins within the three bytes before.
  static size_t piece_end(std::string_view word, size_t begin) {
    if (word.size() - begin <= kMaxWordBytes) return word.size();
    const size_t limit = begin + kMaxWordBytes;
    for (size_t end = limit; end + 3 >= limit && end > begin; --end)
      if ((static_cast<unsigned char>(word[end]) & 0xC0) != 0x80) return end;
    return limit;
  }

 private:
  void encode_uncached(std::string_view word, bool cacheable, std::vector<int32_t>& out) {
    const BpeModel& model = model_;  // a local, held in a register in the loops
    const size_t first = out.size();
    const int64_t* whole = model.ignore_merges ? model.vocab.find(word) : nullptr;
    if (whole)
      out.push_back(int32_t(*whole));
    else
      merge_word(word, out);
    if (cacheable) store_cached(word_cache_, word, out, first);
  }

  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t start, len;  // bytes of the word this symbol covers; len 0: merged away
    bool plain;           // a one-character vocabulary entry (not unk or byte fallback)
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t left, right, id;
  };
  static constexpr size_t kMaxCachedBytes = 256;            // Hugging Face's MAX_LENGTH
  static constexpr size_t kShortWord = 24;                  // merge_short up to this many symbols
  static constexpr size_t kMaxCachedIds = size_t(1) << 24;  // bound on one call's cache

  // A cache maps a word to (offset << 24 | count) of its ids in cached_.
  void append_ids(int64_t cached, std::vector<int32_t>& out) const {
    const auto begin = cached_.begin() + (cached >> 24);
    out.insert(out.end(), begin, begin + (cached & 0xFFFFFF));
  }
  bool append_cached(const StringTable& cache, std::string_view key,
                     std::vector<int32_t>& out) const {
    const int64_t* v = cache.find(key);
    if (!v) return false;
    append_ids(*v, out);
    return true;
  }
  void store_cached(StringTable& cache, std::string_view key, const std::vector<int32_t>& out,
                    size_t first) {
    if (cached_.size() > kMaxCachedIds) return;
    const int64_t value = (int64_t(cached_.size()) << 24) | int64_t(out.size() - first);
    cached_.insert(cached_.end(), out.begin() + first, out.end());
    cache.insert(key, value);
  }

  /// The unit of `word` at `i` (a byte for byte-level BPE, else a character or a stray byte):
  /// its length, and in `id` its token (-1: none).
  size_t unit_at(std::string_view word, size_t i, bool affixes, int32_t& id) {
    const BpeModel& model = model_;  // a local, held in a register in the loops
    const auto* bytes = reinterpret_cast<const unsigned char*>(word.data());
    if (affixes) {
      const size_t len = model.byte_level ? 1 : unit_length(word, i);
      std::string& s = scratch_;
      s.clear();
      if (i > 0) s += model.prefix;
      s.append(word, i, len);
      if (i + len == word.size()) s += model.suffix;
      const int64_t* v = model.vocab.find(s);
      id = v ? int32_t(*v) : -1;
      return len;
    }
    if (model.byte_level) {
      id = model.byte_ids[bytes[i]];
      return 1;
    }
    if (bytes[i] < 0x80) {
      id = model.char_ids[bytes[i]];
      return 1;
    }
    const size_t n = utf8_length(bytes + i, word.size() - i);
    const uint32_t cp = n ? code_point(bytes + i, n) : 0xFFFFFFFFu;
    id = -1;
    if (cp < model.char_ids.size()) {
      id = model.char_ids[cp];
    } else if (n) {
      const int64_t* v = model.vocab.find(word.substr(i, n));
      id = v ? int32_t(*v) : -1;
    }
    return n ? n : 1;
  }

  /// Hugging Face's BPE::merge_word: the word's units as symbols, then merges. Long words are
  /// cut where no merge can ever cross (see BpeModel::left_partners) and the parts merged (and
  /// cached) one by one: the result is the same.
  void merge_word(std::string_view word, std::vector<int32_t>& out) {
    const BpeModel& model = model_;  // a local, held in a register in the loops
    std::vector<Symbol>& sym = symbols_;
    sym.clear();
    // Long words go out part by part: the symbols so far are merged (or found in the cache)
    // as soon as the next one may be cut from them.
    const bool cut = word.size() > kMaxCachedBytes && model.segmentable;
    StringTable& cache = model.ignore_merges ? segment_cache_ : word_cache_;
    size_t part_begin = 0;  // bytes of the part in sym
    size_t part_end = 0;
    const auto flush_part = [&] {
      const std::string_view key = word.substr(part_begin, part_end - part_begin);
      if (key.size() > kMaxCachedBytes) {
        merge_symbols(0, sym.size(), out);
      } else if (!append_cached(cache, key, out)) {
        const size_t before = out.size();
        merge_symbols(0, sym.size(), out);
        store_cached(cache, key, out, before);
      }
      sym.clear();
      part_begin = part_end;
    };
    const auto add = [&](int32_t id, size_t start, size_t len, bool plain) {
      const Symbol s{id, 0, 0, uint32_t(start), uint32_t(len), plain};
      if (cut && !sym.empty() && can_cut(sym.back(), s)) flush_part();
      sym.push_back(s);
      part_end = std::max(part_end, start + len);
    };
    std::optional<std::pair<int32_t, std::pair<size_t, size_t>>> unk;  // pending (id, start, len)
    const auto flush_unk = [&] {
      if (unk) add(unk->first, unk->second.first, unk->second.second, false);
      unk.reset();
    };
    const bool affixes = !model.prefix.empty() || !model.suffix.empty();
    for (size_t i = 0; i < word.size();) {
      int32_t id = -1;
      const size_t len = unit_at(word, i, affixes, id);
      if (id >= 0) {
        flush_unk();
        add(id, i, len, !affixes);
      } else if (model.byte_fallback &&
                 std::all_of(word.begin() + i, word.begin() + i + len, [&](char c) {
                   return model.byte_fallback_ids[static_cast<unsigned char>(c)] >= 0;
                 })) {
        // (A pending unk goes after these bytes, as in Hugging Face's merge_word.)
        for (size_t k = 0; k < len; ++k)
          add(model.byte_fallback_ids[static_cast<unsigned char>(word[i + k])], i + k, 1, false);
      } else if (model.unk_id) {
        if (unk && model.fuse_unk) {
          unk->second.second += len;
        } else {
          flush_unk();
          unk = {*model.unk_id, {i, len}};
        }
      }  // else: the character is dropped, as Hugging Face does without an unk token
      i += len;
    }
    flush_unk();
    if (sym.empty()) return;
    if (cut)
      flush_part();
    else
      merge_symbols(0, sym.size(), out);
  }

  /// Whether no merge can ever join a symbol ending with `l` to one starting with `r`: then
  /// the word can be cut between them and the parts merged on their own.
  bool can_cut(const Symbol& l, const Symbol& r) const {
    const BpeModel& model = model_;                // a local, held in a register in the loops
    if (l.start + l.len != r.start) return false;  // (pending unk after byte fallback)
    // A symbol that no merge names stays on its own (a newline's byte token, say).
    if (!model.in_merge[size_t(l.id)] || !model.in_merge[size_t(r.id)]) return true;
    if (!l.plain || !r.plain || !model.partners_known) return false;
    const int32_t* partners = &model.left_partners[size_t(r.id) * 4];
    if (partners[0] < 0) return false;
    for (int32_t k = 0; k < partners[0]; ++k)
      if (partners[1 + k] == l.id) return false;
    return true;
  }

  /// Hugging Face's Word::merge_all on symbols [first, last): the lowest-ranked merge first,
  /// the leftmost of equal ranks, through a priority queue over a linked list (O(n log n)).
  void merge_symbols(size_t first, size_t last, std::vector<int32_t>& out) {
    const BpeModel& model = model_;  // a local, held in a register in the loops
    std::vector<Symbol>& sym = symbols_;
    const size_t n = last - first;
    if (n == 1) {
      out.push_back(sym[first].id);
      return;
    }
    if (n <= kShortWord) {
      merge_short(&sym[first], n, out);
      return;
    }
    for (size_t i = first; i < last; ++i) {
      sym[i].prev = i == first ? -1 : int32_t(i - 1);
      sym[i].next = i + 1 == last ? -1 : int32_t(i + 1);
    }
    std::vector<Candidate>& heap = heap_;
    heap.clear();
    const auto later = [](const Candidate& a, const Candidate& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    const auto push = [&](size_t pos) {
      const int32_t next = sym[pos].next;
      if (next < 0) return;
      if (const auto* m = model.merges.find(sym[pos].id, sym[size_t(next)].id)) {
        heap.push_back(Candidate{m->rank, uint32_t(pos), sym[pos].id, sym[size_t(next)].id, m->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    };
    for (size_t i = first; i + 1 < last; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& left = sym[top.pos];
      // Stale entries: the left symbol was merged away or changed, or its right neighbour did.
      if (left.len == 0 || left.next < 0 || left.id != top.left) continue;
      Symbol& right = sym[size_t(left.next)];
      if (right.id != top.right) continue;
      left.id = top.id;
      left.len += right.len;
      left.next = right.next;
      right.len = 0;
      if (left.next >= 0) sym[size_t(left.next)].prev = int32_t(top.pos);
      if (left.prev >= 0) push(size_t(left.prev));
      push(top.pos);
    }
    for (int32_t i = int32_t(first); i >= 0; i = sym[size_t(i)].next)
      out.push_back(sym[size_t(i)].id);
  }

  /// The same merges for a few symbols, without the queue: the pair of lowest rank (leftmost
  /// of equal ranks) is found by a scan, merged, and its two neighbouring pairs looked up again.
  /// Quadratic, so only for short words, where it is faster than the queue.
  void merge_short(const Symbol* symbols, size_t n, std::vector<int32_t>& out) const {
    const BpeModel& model = model_;  // a local, held in a register in the loops
    constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
    int32_t ids[kShortWord];
    uint32_t rank[kShortWord];
    int32_t merged[kShortWord];
    for (size_t i = 0; i < n; ++i) ids[i] = symbols[i].id;
    const auto look = [&](size_t i) {
      const auto* m = model.merges.find(ids[i], ids[i + 1]);
      rank[i] = m ? m->rank : kNone;
      merged[i] = m ? m->id : 0;
    };
    for (size_t i = 0; i + 1 < n; ++i) look(i);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i)
        if (rank[i] < rank[best]) best = i;
      if (rank[best] == kNone) break;
      ids[best] = merged[best];
      --n;
      for (size_t i = best + 1; i < n; ++i) ids[i] = ids[i + 1];
      for (size_t i = best + 1; i + 1 < n; ++i) {
        rank[i] = rank[i + 1];
        merged[i] = merged[i + 1];
      }
      if (best > 0) look(best - 1);
      if (best + 1 < n) look(best);
    }
    out.insert(out.end(), ids, ids + n);
  }

  const BpeModel& model_;
  StringTable word_cache_, segment_cache_;
  std::vector<int32_t> cached_;
  std::vector<Symbol> symbols_;
  std::vector<Candidate> heap_;
  std::string scratch_;
};

}  // namespace retnet::detail::hf
