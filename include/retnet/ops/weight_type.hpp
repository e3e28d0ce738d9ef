// The types a linear map's weights can be stored in, as a user and a checkpoint name them: the
// model's own scalar type ("f32"), IEEE binary16 ("f16"), bfloat16, and two block formats, q8 and
// q4, that quantise each run of kQuantBlock values along a row of W against one scale. What the
// bytes of each type are is ops/quantize.hpp (the blocks) and ops/panel_format.hpp (the panels that
// products read).
#pragma once

#include <string>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"

namespace retnet {

// (kF16 last: the values of the others stay as they are where a number names a type, as in
// benchmarks/bench_kernels.cpp's TypedProduct arguments.)
enum class WeightType { kF32, kBF16, kQ8, kQ4, kF16 };

/// "f32", "f16", "bf16", "q8" or "q4": the names of --weights and of converted checkpoints.
inline const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kF16:
      return "f16";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kQ8:
      return "q8";
    case WeightType::kQ4:
      return "q4";
  }
  return "?";
}

/// The type named `name`; InvalidArgument naming the choices otherwise.
inline WeightType parse_weight_type(const std::string& name) {
  for (WeightType t :
       {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8, WeightType::kQ4})
    if (name == weight_type_name(t)) return t;
  throw InvalidArgument("unknown weight type '" + name.substr(0, 32) +
                        "' (expected f32, f16, bf16, q8 or q4)");
}

/// f16 and bf16: 16-bit floats, one per weight, that the products decode to float as they read
/// them.
inline bool is_16_bit_float(WeightType type) {
  return type == WeightType::kF16 || type == WeightType::kBF16;
}

inline bool is_block_quantised(WeightType type) {
  return type == WeightType::kQ8 || type == WeightType::kQ4;
}

/// Values of a row that share one scale in q8 and q4 (a converted checkpoint records it as its
/// quantization_config's block_size).
constexpr Index kQuantBlock = 32;

}  // namespace retnet
