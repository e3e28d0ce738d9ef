// The three forms of retention. They compute the same function (see retention_common.hpp)
// and share one state, so a sequence can be split between them at any position.
#pragma once

#include "retnet/kernels/chunkwise_retention.hpp"
#include "retnet/kernels/parallel_retention.hpp"
#include "retnet/kernels/recurrent_retention.hpp"
#include "retnet/kernels/retention_common.hpp"
