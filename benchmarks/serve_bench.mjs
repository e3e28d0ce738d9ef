// Load generator for `retnet serve` (Node 18+, no packages): streams over loopback only, a
// bounded number of requests. Every measurement alternates its two sides round by round, so that
// a shared machine's load falls on both alike.
//   node serve_bench.mjs URL [--rounds R] [--tokens T] [--streams N] [--history H]
//                            [--session-rounds S] [--only streams|sessions] [--json OUT]
// 1. Streams: R rounds of {1 stream, N concurrent streams} of T tokens each: total tokens/s
//    (tokens / time from the first request to the last token) and the time between tokens of
//    each stream (p50, p99).
// 2. Sessions: a session holding H tokens; S rounds of {the whole history plus 4 new tokens sent
//    again, then continuing the session with the 4 tokens and a fresh 4-token prompt, in an order
//    that alternates}: time to first token. Whichever short request comes right after the long
//    one waits longer (about 0.5 ms with the demo model), so continue_over_fresh compares like
//    with like: per pair of rounds, the geometric mean of the two rounds' ratios (= that of
//    "both right after the long request" and "both second"), median over the pairs. The median
//    of the single rounds' ratios is kept as continue_over_fresh_per_round: its rounds fall into
//    two groups (session slowed, fresh slowed), and with an even count the median is the lower
//    end of the upper group.
// Token counts come from logprobs (one entry per token), not from counting pieces.
import fs from "node:fs";
import os from "node:os";

const args = process.argv.slice(2);
const url = args[0];
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const rounds = Number(opt("--rounds", 5));
const tokens = Number(opt("--tokens", 256));
const streams = Number(opt("--streams", 8));
const history = Number(opt("--history", 4000));
const sessionRounds = 2 * Math.ceil(Number(opt("--session-rounds", 16)) / 2);  // whole pairs
const out = opt("--json", null);
if (!/^http:\/\/(127\.0\.0\.1|localhost)(:\d+)?$/.test(url || ""))
  throw new Error("give the server's loopback URL, e.g. http://127.0.0.1:8080");

const headers = { "Content-Type": "application/json" };
if (process.env.RETNET_API_KEY) headers.Authorization = `Bearer ${process.env.RETNET_API_KEY}`;
const loadavg = () => os.loadavg()[0];

/// One streamed completion: arrival time (ms) of each piece and the tokens it carried.
async function stream(body) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST", headers,
    body: JSON.stringify({ ...body, stream: true, logprobs: 0 }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const pieces = [];  // [ms since t0, tokens]
  let timings = null;  // the server's, from the last chunk
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const now = performance.now() - t0;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const msg = JSON.parse(event.slice(6));
      if (msg.error) throw new Error(msg.error.message);
      if (msg.timings) timings = msg.timings;
      const lp = msg.choices[0] && msg.choices[0].logprobs;
      if (lp && lp.tokens.length) pieces.push([now, lp.tokens.length]);
    }
  }
  return { t0, pieces, timings, end: performance.now() };
}

const quantile = (v, q) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : NaN;
};
const median = (v) => quantile(v, 0.5);

async function streamsRun(n, round) {
  const start = performance.now();
  const load = loadavg();
  const runs = await Promise.all(Array.from({ length: n }, (_, i) =>
    stream({ prompt: ["ROMEO:", "JULIET:", "KING HENRY:", "First Citizen:"][i % 4],
             max_tokens: tokens, temperature: 1, seed: 100 * round + i })));
  const end = Math.max(...runs.map((r) => r.end));
  let total = 0;
  const gaps = [];
  let pieces = 0;
  for (const r of runs) {
    for (let i = 0; i < r.pieces.length; ++i) {
      total += r.pieces[i][1];
      if (i > 0) gaps.push(r.pieces[i][0] - r.pieces[i - 1][0]);
    }
    pieces += r.pieces.length;
  }
  return { streams: n, tokens: total, seconds: (end - start) / 1000,
           tokens_per_s: total / ((end - start) / 1000), gap_p50_ms: median(gaps),
           gap_p99_ms: quantile(gaps, 0.99), tokens_per_piece: total / pieces, load_avg: load };
}

/// Time to first token (ms) as the client sees it; with `server`, also the server's own timings.
async function ttft(body, server) {
  const r = await stream({ ...body, max_tokens: 1, temperature: 0 });
  if (!r.pieces.length) throw new Error("no token came back");
  if (server && r.timings) {
    const t = r.timings;
    server.push({ queued_ms: t.queued_ms, prompt_ms: t.prompt_ms, first_token_ms: t.first_token_ms });
  }
  return r.pieces[0][0];
}

async function call(method, path, body) {
  const res = await fetch(url + path, { method, headers, body: body && JSON.stringify(body) });
  const data = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${JSON.stringify(data)}`);
  return data;
}

const results = { url, rounds, tokens, streams, history, cpus: os.cpus().length,
                  cpu_model: os.cpus()[0].model, started: new Date().toISOString() };
const model = (await call("GET", "/v1/models")).data[0];
results.model = model.id;
results.state_bytes = model.meta.state_bytes;
console.log(`model ${model.id}: state ${(model.meta.state_bytes / 1e6).toFixed(2)} MB`);

const only = opt("--only", "all");  // all | streams | sessions
if (only !== "sessions") {
  await streamsRun(1, 0);  // warm-up: pages touched, threads started
  await streamsRun(streams, 0);
  results.stream_rounds = [];
  for (let round = 1; round <= rounds; ++round) {
    const one = await streamsRun(1, round);
    const many = await streamsRun(streams, round);
    results.stream_rounds.push({ one, many, throughput_ratio: many.tokens_per_s / one.tokens_per_s,
                                 p99_ratio: many.gap_p99_ms / one.gap_p99_ms });
    console.log(`round ${round}: 1 stream ${one.tokens_per_s.toFixed(0)} tok/s (p99 gap ` +
                `${one.gap_p99_ms.toFixed(2)} ms), ${streams} streams ${many.tokens_per_s.toFixed(0)} ` +
                `tok/s (p99 gap ${many.gap_p99_ms.toFixed(2)} ms): ` +
                `${(many.tokens_per_s / one.tokens_per_s).toFixed(2)} x, p99 ` +
                `${(many.gap_p99_ms / one.gap_p99_ms).toFixed(2)} x; load ${one.load_avg.toFixed(1)}`);
  }
  const sr = results.stream_rounds;
  results.streams_summary = {
    one_tokens_per_s: median(sr.map((r) => r.one.tokens_per_s)),
    many_tokens_per_s: median(sr.map((r) => r.many.tokens_per_s)),
    throughput_ratio_median: median(sr.map((r) => r.throughput_ratio)),
    throughput_ratio_range: [Math.min(...sr.map((r) => r.throughput_ratio)),
                             Math.max(...sr.map((r) => r.throughput_ratio))],
    one_gap_p99_ms: median(sr.map((r) => r.one.gap_p99_ms)),
    many_gap_p99_ms: median(sr.map((r) => r.many.gap_p99_ms)),
    p99_ratio_median: median(sr.map((r) => r.p99_ratio)),
    p99_ratio_range: [Math.min(...sr.map((r) => r.p99_ratio)), Math.max(...sr.map((r) => r.p99_ratio))],
  };
}

// Sessions: a history of exactly `history` tokens, read once into a session.
if (history > 0 && only !== "streams") {
  const base = "ROMEO:\nWhat light through yonder window breaks? It is the east.\n";
  let text = base.repeat(Math.ceil(history / base.length) + 1);
  text = text.slice(0, history);
  const count = (await call("POST", "/tokenize", { content: text })).tokens.length;
  if (count !== history) throw new Error(`the history is ${count} tokens, not ${history}`);
  const id = `bench-${process.pid}`;
  await call("POST", "/v1/sessions", { id });
  await call("POST", "/v1/completions", { prompt: text, max_tokens: 0, session: id });
  const more = " And";  // 4 tokens with a byte tokenizer
  results.session_rounds = [];
  await ttft({ prompt: more });  // warm-up
  for (let round = 0; round < sessionRounds; ++round) {
    // The long request first, then the two short ones in alternating order, so that neither
    // always comes right after it.
    const resend = await ttft({ prompt: text + more });
    let session, fresh;
    const server = [];
    if (round % 2 === 0) {
      session = await ttft({ prompt: more, session: id }, server);
      fresh = await ttft({ prompt: more }, server);
    } else {
      fresh = await ttft({ prompt: more }, server);
      session = await ttft({ prompt: more, session: id }, server);
    }
    const first = round % 2 === 0 ? "session" : "fresh";
    const [a, b] = server;
    results.session_rounds.push({ session, fresh, resend, first,
                                  server_session: first === "session" ? a : b,
                                  server_fresh: first === "session" ? b : a, load_avg: loadavg() });
    console.log(`session round ${round + 1}: continue ${session.toFixed(1)} ms, fresh ` +
                `${fresh.toFixed(1)} ms, whole history again ${resend.toFixed(1)} ms`);
  }
  await call("DELETE", `/v1/sessions/${id}`);
  const s = results.session_rounds;
  const ratio = (r) => r.session / r.fresh;
  const pairs = [];  // rounds 2j (session first) and 2j+1 (fresh first)
  for (let j = 0; j + 1 < s.length; j += 2) pairs.push(Math.sqrt(ratio(s[j]) * ratio(s[j + 1])));
  const at = (first, side) => s.filter((r) => r.first === first).map((r) => r[side]);
  const server = (side, field) => median(s.filter((r) => r[side]).map((r) => r[side][field]));
  results.session_summary = {
    history_tokens: history,
    continue_ttft_ms: median(s.map((r) => r.session)),
    fresh_ttft_ms: median(s.map((r) => r.fresh)),
    resend_ttft_ms: median(s.map((r) => r.resend)),
    continue_over_fresh: median(pairs),
    continue_over_fresh_range: [Math.min(...pairs), Math.max(...pairs)],
    // Both right after the long request; both second.
    continue_over_fresh_after_resend: median(at("session", "session")) / median(at("fresh", "fresh")),
    continue_over_fresh_second: median(at("fresh", "session")) / median(at("session", "fresh")),
    continue_over_fresh_per_round: median(s.map(ratio)),
    continue_over_fresh_per_round_range: [Math.min(...s.map(ratio)), Math.max(...s.map(ratio))],
    // The server's own timings (ms from the request's submission to the engine): a difference
    // here is the engine's; one only in the client's times is HTTP, the session store or the
    // machine.
    server_continue_prompt_ms: server("server_session", "prompt_ms"),
    server_fresh_prompt_ms: server("server_fresh", "prompt_ms"),
    server_continue_first_token_ms: server("server_session", "first_token_ms"),
    server_fresh_first_token_ms: server("server_fresh", "first_token_ms"),
  };
}
results.finished = new Date().toISOString();
console.log(JSON.stringify({ streams: results.streams_summary, sessions: results.session_summary }, null, 1));
if (out) fs.writeFileSync(out, JSON.stringify(results, null, 1) + "\n");
