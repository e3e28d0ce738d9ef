// The BPE model of tokenizer.json: its vocabulary and merges as lookup tables, read from
// model.vocab and model.merges. Encoding a word with it is bpe_word.hpp.
//
// Byte-level vocabularies are held as raw bytes (GPT-2's byte-to-unicode table undone at
// load), so ByteLevel costs nothing at encode time and any byte string can be encoded.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"
#include "retnet/text/hf/byte_level.hpp"
#include "retnet/text/hf/hash_tables.hpp"
#include "retnet/text/hf/token_index.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

class BpeModel {
 public:
  /// Reads tokenizer.json's "model" (`model`, with the entries streamed into `parts`) and
  /// records every vocabulary token in `index`. `byte_level`: the pre-tokenizer ends with
  /// ByteLevel, so the model works on bytes.
  static BpeModel load(const JsonObject& model, TokenizerJsonParts& parts, bool byte_level,
                       TokenIndex& index) {
    BpeModel m;
    m.byte_level = byte_level;
    m.load_options(model);
    m.load_vocab(model, parts, index);
    if (const auto unk = model.optional_string("unk_token")) {
      const auto id = m.token_id(*unk);
      if (!id) model.fail("unk_token", "= " + excerpt(*unk) + " is not in model.vocab");
      m.unk_id = *id;
    }
    m.load_unit_tables();
    m.load_merges(model, parts, index.size());
    return m;
  }

  /// Id of a model token given as tokenizer.json writes it.
  std::optional<int32_t> token_id(const std::string& token) const {
    if (byte_level) {
      if (const auto bytes = byte_level_to_bytes(token)) {
        const int64_t* v = vocab.find(*bytes);
        return v ? std::optional<int32_t>(int32_t(*v)) : std::nullopt;
      }
      const auto it = unmapped.find(token);
      return it == unmapped.end() ? std::nullopt : std::optional<int32_t>(it->second);
    }
    const int64_t* v = vocab.find(token);
    return v ? std::optional<int32_t>(int32_t(*v)) : std::nullopt;
  }

  /// How many tokens model.vocab holds.
  size_t token_count() const { return vocab.size() + unmapped.size(); }

  /// The id of the one-unit token `unit` (a byte for byte-level BPE, else a character), or -1.
  int32_t unit_id(std::string_view unit) const {
    const auto* p = reinterpret_cast<const unsigned char*>(unit.data());
    if (byte_level) return unit.size() == 1 ? byte_ids[p[0]] : -1;
    const size_t n = utf8_length(p, unit.size());
    if (n == unit.size() && n > 0) {
      const uint32_t cp = code_point(p, n);
      if (cp < char_ids.size()) return char_ids[cp];
    }
    const int64_t* v = vocab.find(unit);
    return v ? int32_t(*v) : -1;
  }

  // ---- The model, read-only once loaded ----

  bool byte_level = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix (model's space)
  std::optional<int32_t> unk_id;
  StringTable vocab;                                  // in the model's space
  std::unordered_map<std::string, int32_t> unmapped;  // byte-level tokens no bytes produce
  MergeTable merges;
  std::array<int32_t, 256> byte_ids{};           // byte-level: byte -> its one-byte token
  std::array<int32_t, 256> byte_fallback_ids{};  // byte -> its <0xNN> token
  std::vector<int32_t> char_ids;                 // code point < 0x10000 -> one-character token
  std::vector<int32_t> left_partners;            // per id: [count or -1 for many, up to 3 ids]
  std::vector<uint8_t> in_merge;                 // per id: named by some merge
  bool segmentable = true;                       // the symbols of a word do not depend on position
  bool partners_known = true;                    // left_partners covers every merge

 private:
  // One entry of model.merges on its way into the table (see load_merges).
  struct PendingMerge {
    size_t index = 0;  // in model.merges
    uint32_t rank = 0;
    std::string_view a, b;  // as tokenizer.json writes them
    std::string a_bytes, b_bytes, joined;
    std::string_view a_key, b_key;  // in the model's space
    bool mapped = true;             // both are byte-level text (always, for other models)
    uint64_t a_hash = 0, b_hash = 0, joined_hash = 0;
    int64_t a_id = 0, b_id = 0, merged_id = 0;
  };

  void load_options(const JsonObject& model) {
    const std::string type = model.string("type", "BPE");
    if (type != "BPE")
      model.fail("type", "= " + excerpt(type) +
                             " is not supported (only BPE; not WordPiece, Unigram, WordLevel)");
    if (const auto dropout = model.optional_number("dropout"); dropout && *dropout != 0.0)
      model.fail("dropout", "is set: random BPE dropout is not supported");
    byte_fallback = model.boolean("byte_fallback", false);
    fuse_unk = model.boolean("fuse_unk", false);
    ignore_merges = model.boolean("ignore_merges", false);
    prefix = model.string("continuing_subword_prefix", "");
    suffix = model.string("end_of_word_suffix", "");
    if (!byte_level) return;
    // The model works on raw bytes: undo the byte-to-unicode map.
    for (auto [key, affix] :
         {std::pair<const char*, std::string*>{"continuing_subword_prefix", &prefix},
          {"end_of_word_suffix", &suffix}}) {
      const auto bytes = byte_level_to_bytes(*affix);
      if (!bytes) model.fail(key, "= " + excerpt(*affix) + " is not byte-level text");
      *affix = *bytes;
    }
  }

  /// model.vocab into `vocab` (or `unmapped`) and `index`.
  void load_vocab(const JsonObject& model, TokenizerJsonParts& parts, TokenIndex& index) {
    if (!parts.has_vocab) {
      if (model.has("vocab"))
        model.fail("vocab", "must be an object of token: id, found " +
                                JsonObject::kind(model.require("vocab")));
      model.require("vocab");
    }
    if (parts.vocab.empty()) model.fail("vocab", "is empty");
    const int64_t max_id = int64_t(2 * parts.vocab.size() + 4096);  // ids must be dense-ish
    int64_t largest = -1;
    for (const auto& [token, id] : parts.vocab) {
      if (id < 0 || id > max_id)
        model.fail("vocab", "gives " + excerpt(token) + " the id " + std::to_string(id) +
                                ", outside [0, " + std::to_string(max_id) +
                                "] (ids must be dense)");
      largest = std::max(largest, id);
    }
    index.grow(size_t(largest + 1));
    vocab.reserve(parts.vocab.size());
    std::string bytes;
    for (auto& [token, id] : parts.vocab) {
      const bool mapped = !byte_level || byte_level_to_bytes(token, bytes);
      const bool added = mapped ? vocab.insert(byte_level ? std::string_view(bytes) : token, id)
                                : unmapped.emplace(token, int32_t(id)).second;
      if (!added)
        model.fail("vocab",
                   "has the token " + excerpt(token) + " twice: duplicate keys are refused");
      if (index.present[size_t(id)])
        model.fail("vocab", "gives id " + std::to_string(id) + " to both " +
                                excerpt(index.text[size_t(id)]) + " and " + excerpt(token));
      index.text[size_t(id)] = std::move(token);
      index.present[size_t(id)] = 1;
    }
  }

  /// Single characters and bytes, for the merge loop's initial symbols.
  void load_unit_tables() {
    byte_ids.fill(-1);
    byte_fallback_ids.fill(-1);
    static const char* const kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      if (byte_level)
        if (const int64_t* v = vocab.find(std::string(1, char(b))))
          byte_ids[size_t(b)] = int32_t(*v);
      const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      if (byte_fallback)
        if (const auto id = token_id(name)) byte_fallback_ids[size_t(b)] = *id;
    }
    if (byte_level) return;
    char_ids.assign(0x10000, -1);
    std::string ch;
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      ch.clear();
      append_utf8(ch, cp);
      if (const int64_t* v = vocab.find(ch)) char_ids[cp] = int32_t(*v);
    }
  }

  /// model.merges, in batches: the keys of a batch are hashed and their slots prefetched first,
  /// so that the lookups (three per merge, at random places of a table of several megabytes)
  /// wait on memory together rather than one after another. `ids`: the size of the id space.
  void load_merges(const JsonObject& model, const TokenizerJsonParts& parts, size_t ids) {
    if (!parts.has_merges) {
      if (model.has("merges")) model.fail("merges", "must be an array");
      model.require("merges");
    }
    merges.reserve(parts.merges.size());
    left_partners.assign(ids * 4, 0);
    in_merge.assign(ids, 0);
    segmentable = prefix.empty() && suffix.empty();
    partners_known = true;
    constexpr size_t kBatch = 64;
    std::vector<PendingMerge> batch(kBatch);
    uint32_t rank = 0;
    for (size_t i = 0; i < parts.merges.size();) {
      size_t count = 0;
      std::optional<size_t> bad_line;
      for (; i < parts.merges.size() && count < kBatch; ++i) {
        const TokenizerJsonParts::Merge& entry = parts.merges[i];
        if (entry.line && entry.a.compare(0, 8, "#version") == 0) continue;
        PendingMerge& pending = batch[count];
        if (!split_merge(entry, pending)) {
          bad_line = i;
          break;
        }
        pending.index = i;
        pending.rank = rank++;
        prepare_merge(pending);
        ++count;
      }
      const size_t kept = resolve_merges(model, batch, count);
      for (size_t k = 0; k < kept; ++k) add_merge(batch[k]);
      if (bad_line)
        model.fail("merges[" + std::to_string(*bad_line) + "]",
                   "= " + excerpt(parts.merges[*bad_line].a) +
                       " is not two tokens separated by one space");
    }
  }

  /// The two tokens of a merge; false for a line that is not "a b".
  static bool split_merge(const TokenizerJsonParts::Merge& entry, PendingMerge& m) {
    if (!entry.line) {
      m.a = entry.a;
      m.b = entry.b;
      return true;
    }
    const size_t space = entry.a.find(' ');
    if (space == std::string::npos || entry.a.find(' ', space + 1) != std::string::npos)
      return false;
    m.a = std::string_view(entry.a).substr(0, space);
    m.b = std::string_view(entry.a).substr(space + 1);
    return true;
  }

  /// The merge's keys in the model's space, hashed, and their vocabulary slots prefetched.
  void prepare_merge(PendingMerge& m) const {
    m.a_key = m.a;
    m.b_key = m.b;
    m.mapped = true;
    if (byte_level) {
      m.mapped = byte_level_to_bytes(m.a, m.a_bytes) && byte_level_to_bytes(m.b, m.b_bytes);
      m.a_key = m.a_bytes;
      m.b_key = m.b_bytes;
    }
    std::string_view b_rest = m.b_key;  // Hugging Face drops prefix_len bytes of b
    b_rest.remove_prefix(std::min(prefix.size(), b_rest.size()));
    m.joined.assign(m.a_key);
    m.joined.append(b_rest);
    m.a_hash = hash_bytes(m.a_key);
    m.b_hash = hash_bytes(m.b_key);
    m.joined_hash = hash_bytes(m.joined);
    vocab.prefetch(m.a_hash);
    vocab.prefetch(m.b_hash);
    vocab.prefetch(m.joined_hash);
  }

  /// Looks up the ids of batch[0, count), keeping at the front (and counting) the merges that
  /// can apply; a merge naming a token no bytes produce never applies and is dropped.
  size_t resolve_merges(const JsonObject& model, std::vector<PendingMerge>& batch,
                        size_t count) const {
    size_t kept = 0;
    for (size_t k = 0; k < count; ++k) {
      PendingMerge& m = batch[k];
      const int64_t* a_id = m.mapped ? vocab.find(m.a_key, m.a_hash) : nullptr;
      const int64_t* b_id = m.mapped ? vocab.find(m.b_key, m.b_hash) : nullptr;
      if (!a_id || !b_id) {
        const bool a_known = a_id || token_id(std::string(m.a));
        const bool b_known = b_id || token_id(std::string(m.b));
        if (!a_known || !b_known)
          fail_merge(model, m,
                     "names " + excerpt(a_known ? m.b : m.a) + ", which is not in model.vocab");
        continue;
      }
      const int64_t* merged = vocab.find(m.joined, m.joined_hash);
      if (!merged)
        fail_merge(model, m,
                   "makes " + excerpt(byte_level ? std::string(m.a) + std::string(m.b) : m.joined) +
                       ", which is not in model.vocab");
      m.a_id = *a_id;
      m.b_id = *b_id;
      m.merged_id = *merged;
      merges.prefetch(int32_t(m.a_id), int32_t(m.b_id));
      if (kept != k) std::swap(batch[kept], batch[k]);
      ++kept;
    }
    return kept;
  }

  [[noreturn]] static void fail_merge(const JsonObject& model, const PendingMerge& m,
                                      const std::string& problem) {
    model.fail("merges[" + std::to_string(m.index) + "]",
               "= " + excerpt(std::string(m.a) + " " + std::string(m.b)) + " " + problem);
  }

  void add_merge(const PendingMerge& m) {
    merges.assign(int32_t(m.a_id), int32_t(m.b_id), {m.rank, int32_t(m.merged_id)});
    in_merge[size_t(m.a_id)] = 1;
    in_merge[size_t(m.b_id)] = 1;
    note_partners(m.a_key, m.b_key);
  }

  /// Records that a merge can join a symbol ending with the last unit of `a` to one starting
  /// with the first unit of `b` (left_partners of that first unit: up to three, or "many").
  void note_partners(std::string_view a, std::string_view b) {
    if (!partners_known) return;
    if (a.empty() || b.empty()) {
      partners_known = false;
      return;
    }
    const size_t a_last = byte_level ? a.size() - 1 : previous_unit(a, a.size());
    const size_t b_len = byte_level ? 1 : unit_length(b, 0);
    const int32_t last = unit_id(a.substr(a_last));
    const int32_t first = unit_id(b.substr(0, b_len));
    if (last < 0 || first < 0) {  // a unit that is no token of its own: cut only next to
      partners_known = false;     // unmerged symbols
      return;
    }
    int32_t* p = &left_partners[size_t(first) * 4];
    if (p[0] < 0) return;
    for (int32_t k = 0; k < p[0]; ++k)
      if (p[1 + k] == last) return;
    if (p[0] == 3) {
      p[0] = -1;
      return;
    }
    p[1 + p[0]++] = last;
  }
};

}  // namespace retnet::detail::hf
