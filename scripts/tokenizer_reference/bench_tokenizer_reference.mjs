// Encoding speed of the JavaScript references on a text, for benchmarks/bench_tokenizer.py.
//     node bench_tokenizer_reference.mjs TEXT_FILE TOKENIZER_DIR --impl js|rust [--ids OUT.json]
// (after `npm ci` in scripts/tokenizer_reference/). Prints one JSON object: encode_s (one run,
// after loading; wall clock), MB/s (10^6 bytes per second), the same from the process's CPU time
// (_cpu), token count. --ids writes the ids, to compare with retnet's.
//   js:   transformers.js (@lenml/tokenizers; reads tokenizer.json and tokenizer_config.json)
//   rust: Hugging Face's Rust tokenizers as Node bindings (@anush008/tokenizers)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const [textFile, dir] = args;
const impl = option("--impl", "js");
if (!textFile || !dir || !["js", "rust"].includes(impl)) {
  console.error("usage: node bench_tokenizer_reference.mjs TEXT_FILE TOKENIZER_DIR --impl js|rust [--ids OUT]");
  process.exit(2);
}
const text = fs.readFileSync(textFile, "utf8");
const bytes = Buffer.byteLength(text, "utf8");

let encode;
if (impl === "js") {
  const { TokenizerLoader } = await import("@lenml/tokenizers");
  const configFile = path.join(dir, "tokenizer_config.json");
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: fs.existsSync(configFile) ? JSON.parse(fs.readFileSync(configFile, "utf8")) : {},
  });
  encode = async (t) => Array.from(tok.encode(t), Number);
} else {
  const { Tokenizer } = require("@anush008/tokenizers");
  const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
  encode = async (t) => Array.from((await tok.encode(t, null, { addSpecialTokens: true })).getIds(), Number);
}
await encode("warm up");
const start = process.hrtime.bigint();
const cpuStart = process.cpuUsage();
const ids = await encode(text);
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
const cpu = process.cpuUsage(cpuStart);
const cpuSeconds = (cpu.user + cpu.system) / 1e6;
const idsFile = option("--ids", null);
if (idsFile) fs.writeFileSync(idsFile, JSON.stringify(ids));
console.log(JSON.stringify({ tokenizer: dir, impl, bytes, tokens: ids.length, encode_s: seconds,
                             encode_cpu_s: cpuSeconds, mb_per_s: bytes / seconds / 1e6,
                             mb_per_cpu_s: bytes / cpuSeconds / 1e6 }));
