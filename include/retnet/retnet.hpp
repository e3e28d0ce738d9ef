// Entry header: RetNet models. Include it for
//
//   load_model, LoadOptions         a model folder (config.json + safetensors) into a RetNetModel
//   RetNetModel, Workspace          forward (a prompt, in any Form), step (one token per
//                                   sequence), forward_segments; ModelState: what a sequence
//                                   has read (copyable, saveable)
//   ModelConfig, WeightType         sizes and options; f32, bf16, q8 or q4 linear maps
//   parameter_count, CheckpointReader, load_config, stored_weight_type
//                                   a folder described without loading its weights
//   save_model                      a model written as a folder (another weight type, say)
//   load_config_json                config.json read alone, against the family tables
//   save_generation_state, load_generation_state, save_state, load_state
//                                   what a sequence has read, to a file and back
//   read_regular_file, open_regular_file
//                                   files that may be anything (a FIFO, a device) opened safely
//   Generator, GenerationParams, SamplerParams, GenerationState
//                                   text generation over any Tokenizer; ByteTokenizer
//   everything of retnet/kernels.hpp
//
// Link RetNet::retnet. The other entry headers: retnet/kernels.hpp (the kernels alone, much
// quicker to compile) and retnet/tokenizers.hpp (load_tokenizer and HfTokenizer for
// tokenizer.json; link RetNet::tokenizers, which needs PCRE2).
//
// The headers under retnet/*/ are what the entry headers are built from: they are installed
// because the library is header-only, but programs include the entry headers, and names in a
// `detail` namespace are internal.
#pragma once

#include "retnet/core/file.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/io/config_json.hpp"
#include "retnet/io/load.hpp"
#include "retnet/io/save.hpp"
#include "retnet/io/state_file.hpp"
#include "retnet/kernels.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/family.hpp"
#include "retnet/model/retnet_model.hpp"
#include "retnet/model/state.hpp"
#include "retnet/text/chat_template.hpp"
#include "retnet/text/generate.hpp"
#include "retnet/text/sampler.hpp"
#include "retnet/text/tokenizer.hpp"
