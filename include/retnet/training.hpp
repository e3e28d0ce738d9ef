// Entry header: training RetNet models. Include it (beside retnet/retnet.hpp) for
//
//   DenseModelWeights, dense_weights, linear_weights
//                                   the weights as dense matrices, from and back to a model
//   accumulate_gradients, sequence_loss_and_gradients, GradientOptions, GradientWorkspace
//                                   the loss of next-token prediction and its gradient with
//                                   respect to every weight, in any Form
//                                   (model/model_gradients.hpp)
//   Trainer, TrainOptions, AdamW, LrSchedule, TokenBatcher, initial_weights
//                                   the training loop: AdamW, clipping, warmup + cosine,
//                                   accumulation (train/)
//   save_training_checkpoint, resume_training
//                                   a run saved with its optimiser state, resumed exactly
//
// The gradients of each layer and kernel (layers/*_backward.hpp, kernels/*_backward.hpp) come
// with it. docs/TRAINING.md says how to train; `retnet train` is the command-line front end.
// Link RetNet::retnet.
#pragma once

#include "retnet/model/dense_weights.hpp"
#include "retnet/model/model_gradients.hpp"
#include "retnet/retnet.hpp"
#include "retnet/train/adamw.hpp"
#include "retnet/train/gradient_clipping.hpp"
#include "retnet/train/lr_schedule.hpp"
#include "retnet/train/parameter_views.hpp"
#include "retnet/train/token_data.hpp"
#include "retnet/train/trainer.hpp"
#include "retnet/train/training_checkpoint.hpp"
#include "retnet/train/weight_init.hpp"
