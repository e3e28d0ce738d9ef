// What several commands of the `retnet` command line share: the flags every model command
// declares, token lists as `score --tokens` and `detokenize --ids` read them, timing.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "flags.hpp"

namespace retnet::cli {

using Model = RetNetModel<float>;
using tools::Choice;
using tools::FlagTable;
using tools::Range;
using tools::UsageError;

/// --file takes a regular file (not a FIFO or a device that never ends) of a stated size.
constexpr uint64_t kMaxTextFileBytes = uint64_t(256) << 20;

inline void declare_model(FlagTable& f, std::string& model) {
  f.required(model, "-m|--model", "DIR", "model folder (config.json + weights)");
}

inline void declare_chunk_size(FlagTable& f, std::optional<Index>& chunk_size) {
  f.optional(chunk_size, "--chunk-size", "C", {1, 1 << 20},
             "chunk size of the chunkwise form (default: the config's)");
}

/// The forms a prompt can be read in (--mode); `score` also takes the recurrent one.
inline const std::vector<Choice<Form>> kPromptForms = {{"parallel", Form::kParallel},
                                                       {"chunkwise", Form::kChunkwise}};
inline const std::vector<Choice<Form>> kAllForms = {{"parallel", Form::kParallel},
                                                    {"chunkwise", Form::kChunkwise},
                                                    {"recurrent", Form::kRecurrent}};

inline void set_threads(const std::optional<int>& threads) {
  if (threads) set_num_threads(*threads);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// "1,2,3" as token ids; `what` names the flag in the message about a malformed list.
inline std::vector<int32_t> parse_token_list(const std::string& list, const std::string& what) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string item = list.substr(begin, end - begin);
    char* stop = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || errno == ERANGE || v < 0 ||
        v > std::numeric_limits<int32_t>::max())
      throw UsageError(what + ": expected comma-separated token ids, got '" + item + "'");
    ids.push_back(static_cast<int32_t>(v));
    if (end == list.size()) return ids;
    begin = end + 1;
  }
}

}  // namespace retnet::cli
