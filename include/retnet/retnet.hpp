// Umbrella header: the whole public API of retnet.
#pragma once

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/io/npy.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/kernels/retention.hpp"
#include "retnet/layers/decoder_layer.hpp"
#include "retnet/layers/feed_forward.hpp"
#include "retnet/layers/multiscale_retention.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/load.hpp"
#include "retnet/model/retnet_model.hpp"
#include "retnet/model/state.hpp"
#include "retnet/model/weights.hpp"
#include "retnet/text/sampler.hpp"
#include "retnet/text/tokenizer.hpp"
