// BOS and EOS from the files that may sit beside tokenizer.json (tokenizer_config.json,
// special_tokens_map.json, generation_config.json), and the add_bos_token / add_eos_token
// flags of tokenizer_config.json, which rebuild the post-processor's template.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/post_processor.hpp"
#include "retnet/text/hf/token_index.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"

namespace retnet {

/// The texts of the files that may sit beside tokenizer.json (each optional).
struct HfTokenizerFiles {
  std::optional<std::string> tokenizer_config;    // tokenizer_config.json
  std::optional<std::string> special_tokens_map;  // special_tokens_map.json
  std::optional<std::string> generation_config;   // generation_config.json
};

namespace detail::hf {

struct SpecialTokens {
  std::optional<int32_t> bos;
  std::vector<int32_t> eos;  // generation stops on any of them; the first is eos_id()
};

/// One companion file, parsed: a document whose top level is an object, or nullopt.
struct Companion {
  std::optional<nlohmann::json> document;
  std::string label;

  Companion(const std::optional<std::string>& text, const std::string& dir, const char* name)
      : label(file_label(dir, name)) {
    if (!text) return;
    document = parse_json(*text, label);
    require_object(*document, label);
  }
  std::optional<JsonObject> object() const {
    if (!document) return std::nullopt;
    return JsonObject(*document, label);
  }
};

/// A token the file names at `key`: "text", {"content": "text", ...}, or null.
template <typename TokenToId>
std::optional<int32_t> named_token(const Companion& file, const std::string& key,
                                   const TokenToId& token_to_id) {
  const auto o = file.object();
  if (!o || !o->has(key)) return std::nullopt;
  const std::string token =
      o->require(key).is_object() ? o->object(key).string("content") : o->string(key);
  const std::optional<int32_t> id = token_to_id(token);
  if (!id) o->fail(key, "= " + excerpt(token) + " is not a token of tokenizer.json");
  return id;
}

/// generation_config.json's bos_token_id and eos_token_id (one id or a list).
inline SpecialTokens generation_ids(const Companion& file, const TokenIndex& index) {
  SpecialTokens ids;
  const auto o = file.object();
  if (!o) return ids;
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  const auto check = [&](int64_t id, const std::string& key) {
    if (!index.has(id))
      o->fail(key, "= " + std::to_string(id) + " is not a token of tokenizer.json");
    return int32_t(id);
  };
  if (o->has("bos_token_id"))
    ids.bos = check(o->integer("bos_token_id", 0, kMaxId), "bos_token_id");
  if (!o->has("eos_token_id")) return ids;
  if (o->require("eos_token_id").is_array()) {
    const size_t count = o->array("eos_token_id").size();
    for (size_t i = 0; i < count; ++i)
      ids.eos.push_back(check(o->integer_element("eos_token_id", i, 0, kMaxId),
                              "eos_token_id[" + std::to_string(i) + "]"));
  } else {
    ids.eos.push_back(check(o->integer("eos_token_id", 0, kMaxId), "eos_token_id"));
  }
  return ids;
}

/// add_bos_token / add_eos_token rebuild the template as transformers' Llama-style tokenizers
/// do: [BOS] $A [EOS]; a flag that is absent keeps what tokenizer.json does.
inline void apply_add_flags(const Companion& config, const std::optional<int32_t>& bos,
                            const std::optional<int32_t>& eos, PostProcessor& post) {
  const auto o = config.object();
  if (!o || (!o->has("add_bos_token") && !o->has("add_eos_token"))) return;
  bool bos_on = bos && post.prefix_ids.size() == 1 && post.prefix_ids[0] == *bos;
  bool eos_on = eos && post.suffix_ids.size() == 1 && post.suffix_ids[0] == *eos;
  if (o->has("add_bos_token")) bos_on = o->boolean("add_bos_token", false);
  if (o->has("add_eos_token")) eos_on = o->boolean("add_eos_token", false);
  if (bos_on && !bos) o->fail("add_bos_token", "is true but no BOS token is named");
  if (eos_on && !eos) o->fail("add_eos_token", "is true but no EOS token is named");
  post.prefix_ids = bos_on ? std::vector<int32_t>{*bos} : std::vector<int32_t>{};
  post.suffix_ids = eos_on ? std::vector<int32_t>{*eos} : std::vector<int32_t>{};
}

/// BOS and EOS with the precedence transformers gives them: special_tokens_map.json over
/// tokenizer_config.json; generation_config.json's ids after both for BOS, and first for EOS,
/// which is what generation stops on. Then the add_*_token flags are applied to `post`.
/// `dir` names the folder in messages.
template <typename TokenToId>
SpecialTokens read_special_tokens(const HfTokenizerFiles& files, const std::string& dir,
                                  const TokenToId& token_to_id, const TokenIndex& index,
                                  PostProcessor& post) {
  const Companion config(files.tokenizer_config, dir, "tokenizer_config.json");
  const Companion map(files.special_tokens_map, dir, "special_tokens_map.json");
  const Companion generation(files.generation_config, dir, "generation_config.json");
  const auto in_map = [&](const char* key) { return map.object() && map.object()->has(key); };
  const std::optional<int32_t> token_bos = in_map("bos_token")
                                               ? named_token(map, "bos_token", token_to_id)
                                               : named_token(config, "bos_token", token_to_id);
  const std::optional<int32_t> token_eos = in_map("eos_token")
                                               ? named_token(map, "eos_token", token_to_id)
                                               : named_token(config, "eos_token", token_to_id);
  const SpecialTokens generated = generation_ids(generation, index);
  SpecialTokens result;
  result.bos = token_bos ? token_bos : generated.bos;
  if (!generated.eos.empty())
    result.eos = generated.eos;
  else if (token_eos)
    result.eos = {*token_eos};
  const std::optional<int32_t> eos =
      token_eos ? token_eos
                : (result.eos.empty() ? std::nullopt : std::optional<int32_t>(result.eos.front()));
  apply_add_flags(config, result.bos, eos, post);
  return result;
}

}  // namespace detail::hf
}  // namespace retnet
