// llama.cpp's decode speed without JavaScript: node-llama-cpp's JavaScript thread keeps a core
// busy while a step runs, which on a 2-core machine takes one from llama.cpp's threads. This
// links the same prebuilt libllama that node-llama-cpp loads (its npm package carries the
// matching headers in llama/gitRelease.bundle); benchmarks/llama_cpp_side_by_side.py builds it.
//   decode_native MODEL.gguf THREADS GEN_LEN PROMPT_LEN BACKEND_DIR
// Prints one JSON line from llama_perf_context: "eval" is llama.cpp's own timer of the one-token
// steps (GEN_LEN of them, fixed tokens: a step's cost does not depend on which), without the
// prompt or sampling, like llama-bench's tg test.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

static void quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: decode_native MODEL.gguf THREADS GEN_LEN PROMPT_LEN BACKEND_DIR\n");
    return 2;
  }
  const int threads = std::atoi(argv[2]), gen_len = std::atoi(argv[3]),
            prompt_len = std::atoi(argv[4]);
  if (threads < 1 || gen_len < 1 || prompt_len < 1) {
    std::fprintf(stderr, "decode_native: THREADS, GEN_LEN and PROMPT_LEN must be positive\n");
    return 2;
  }
  llama_log_set(quiet, nullptr);
  ggml_backend_load_all_from_path(argv[5]);
  llama_backend_init();
  llama_model_params model_params = llama_model_default_params();
  model_params.lazy_mode =
      LLAMA_LAZY_MODE_OFF;  // every tensor read at load, as node-llama-cpp does
  llama_model* model = llama_model_load_from_file(argv[1], model_params);
  if (!model) {
    std::fprintf(stderr, "decode_native: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params params = llama_context_default_params();
  params.n_ctx = prompt_len + gen_len + 16;
  params.n_batch = params.n_ubatch = prompt_len;
  params.n_threads = params.n_threads_batch = threads;
  params.no_perf = false;
  llama_context* ctx = llama_init_from_model(model, params);
  if (!ctx) {
    std::fprintf(stderr, "decode_native: cannot create a context\n");
    return 1;
  }
  std::vector<llama_token> prompt(prompt_len);
  for (int i = 0; i < prompt_len; i++) prompt[i] = i == 0 ? 1 : 300 + i;
  // A batch from llama_batch_get_one asks for its last token's logits, so every step runs the
  // output head as generation does. llama_synchronize is where llama.cpp books a step's time.
  if (llama_decode(ctx, llama_batch_get_one(prompt.data(), prompt_len)) != 0) return 1;
  llama_synchronize(ctx);
  for (int i = 0; i < gen_len; i++) {
    llama_token token = 400 + i % 256;
    if (llama_decode(ctx, llama_batch_get_one(&token, 1)) != 0) return 1;
    llama_synchronize(ctx);
  }
  const llama_perf_context_data perf = llama_perf_context(ctx);
  std::printf(
      "{\"threads\": %d, \"prompt_len\": %d, \"decode_steps\": %d, \"decode_tokens_per_s\": %.6g, "
      "\"prompt_tokens_per_s\": %.6g}\n",
      threads, prompt_len, perf.n_eval, perf.n_eval / (perf.t_eval_ms / 1000.0),
      perf.n_p_eval / (perf.t_p_eval_ms / 1000.0));
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
