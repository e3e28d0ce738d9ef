// Umbrella header of RetNet::tokenizers: Hugging Face tokenizer.json (HfTokenizer) and
// load_tokenizer. Needs PCRE2 (link RetNet::tokenizers); retnet/retnet.hpp, the core library,
// does not include it.
#pragma once

#include "retnet/text/hf_tokenizer.hpp"
#include "retnet/text/tokenizer.hpp"
