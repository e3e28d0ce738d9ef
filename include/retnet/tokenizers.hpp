// Umbrella header of RetNet::tokenizers: Hugging Face tokenizer.json (HfTokenizer, assembled
// in retnet/text/hf/tokenizer.hpp from one header per component) and load_tokenizer. Needs
// PCRE2 (link RetNet::tokenizers); retnet/retnet.hpp, the core library, does not include it.
#pragma once

#include "retnet/text/hf/tokenizer.hpp"
#include "retnet/text/tokenizer.hpp"
