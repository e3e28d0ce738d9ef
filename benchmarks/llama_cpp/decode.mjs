// Decodes with llama.cpp (node-llama-cpp's prebuilt CPU binary) and prints llama.cpp's own timer
// as one JSON line, for benchmarks/llama_cpp_side_by_side.py:
//   node decode.mjs MODEL.gguf THREADS GEN_LEN [PROMPT_LEN]
// A prompt of PROMPT_LEN (16) placeholder tokens, then greedy tokens one at a time (GEN_LEN - 1
// one-token steps: the prompt's step yields the first).
// "decode_tokens_per_s" is llama_perf_context's "eval time" line: the time in llama_decode for
// the one-token steps, without the prompt, sampling or JavaScript. Nothing is downloaded: the
// binary comes with the npm package, and `build: "never"` refuses to compile one.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, threadsArg, genArg, promptArg] = process.argv.slice(2);
const threads = Number(threadsArg), genLen = Number(genArg), promptLen = Number(promptArg ?? 16);
if (!modelPath || !(threads >= 1) || !(genLen >= 2) || !(promptLen >= 1)) {
  console.error("usage: node decode.mjs MODEL.gguf THREADS GEN_LEN [PROMPT_LEN]");
  process.exit(2);
}

const perf = {};
const logger = (level, message) => {
  const m = /llama_perf_context_print:\s+(prompt eval|eval) time =\s+([\d.]+) ms \/\s+(\d+)/.exec(message);
  if (m) perf[m[1]] = {ms: Number(m[2]), count: Number(m[3])};
  else if (level === LlamaLogLevel.error) console.error(message);
};
// maxThreads 0: the context's thread count is used as given, not as a hint.
const llama = await getLlama({gpu: false, build: "never", maxThreads: 0, logLevel: LlamaLogLevel.info, logger});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({
  contextSize: promptLen + genLen + 16, batchSize: Math.max(promptLen, 16), threads, performanceTracking: true,
});
const sequence = context.getSequence();
// Token ids above the special and byte tokens, the same for every run.
const prompt = [1, ...Array.from({length: promptLen - 1}, (_, i) => 300 + i)];
// Greedy generation, as a user decodes: every step computes its logits (a step that asks for
// none skips the output head, a sixth to a third of these models' bytes).
let generated = 0;
for await (const token of sequence.evaluate(prompt, {temperature: 0})) {
  if (++generated >= genLen) break;
}
await context.printTimings();
if (!perf["eval"]) {
  console.error("decode.mjs: llama.cpp printed no eval timing");
  process.exit(1);
}
console.log(JSON.stringify({
  threads, prompt_len: promptLen, decode_steps: perf["eval"].count,
  decode_tokens_per_s: perf["eval"].count / (perf["eval"].ms / 1000),
  prompt_tokens_per_s: perf["prompt eval"] ? perf["prompt eval"].count / (perf["prompt eval"].ms / 1000) : null,
}));
await context.dispose();
await model.dispose();
