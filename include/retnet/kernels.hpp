// Entry header: the retention kernels alone, without a model, files or JSON.
//
//   parallel_retention, recurrent_retention, chunkwise_retention  the three forms of one function
//                                                               (docs/NUMERICS.md#retention)
//   retention(Form, ...)            the three behind one switch; Form, form_name
//   RetentionState                  [batch, heads, dk, dv]: shared by the forms, so a sequence
//                                   can move from one to another at any position
//   default_decays, lm_decays       one decay per head
//   Tensor4, Matrix, Index          the row-major Eigen types of core/tensor.hpp
//   set_num_threads, num_threads    the threads of the kernels (the library's pool, and
//                                   OpenMP's for Eigen's products)
//   Error and its subclasses        what the kernels throw on bad shapes
//
// Link RetNet::retnet. The other entry headers: retnet/retnet.hpp (models, loading,
// generation; it includes this one) and retnet/tokenizers.hpp (tokenizer.json).
#pragma once

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/kernels/retention.hpp"
