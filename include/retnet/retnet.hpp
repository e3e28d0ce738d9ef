// Umbrella header: the whole public API of retnet.
#pragma once

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/kernels/retention.hpp"
#include "retnet/model/config.hpp"
