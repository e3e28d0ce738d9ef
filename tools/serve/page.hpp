// The page `retnet serve` answers at "/": type a prompt, watch the completion stream in, see
// tokens/s. Plain HTML and JavaScript in one string: nothing to build, nothing fetched besides
// the server's own API. The page's security headers name the hashes of its script and style.
#pragma once

namespace retnet::serve {

inline const char* const kPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>retnet serve</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem;
         color: #222; background: #fafafa; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
  #model { color: #666; margin-bottom: 1rem; }
  textarea { width: 100%; box-sizing: border-box; font: 14px/1.4 ui-monospace, monospace; padding: .5rem; }
  .row { display: flex; flex-wrap: wrap; gap: .8rem; align-items: center; margin: .6rem 0; }
  .row label { display: flex; gap: .3rem; align-items: center; }
  input[type=number] { width: 5.5rem; }
  button { padding: .35rem 1rem; }
  #out { white-space: pre-wrap; font: 14px/1.45 ui-monospace, monospace; background: #fff;
         border: 1px solid #ddd; padding: .7rem; min-height: 12rem; }
  #out .prompt { color: #888; }
  #stats { color: #444; margin-top: .5rem; font-variant-numeric: tabular-nums; }
  .error { color: #b00020; }
  #out .stopped { color: #b06000; }
</style>
</head>
<body>
<h1>retnet serve</h1>
<div id="model">model: loading…</div>
<div id="notice" class="error"></div>
<textarea id="prompt" rows="4" placeholder="Type a prompt">ROMEO:</textarea>
<div class="row">
  <label>max tokens <input id="max_tokens" type="number" value="200" min="1"></label>
  <label>seed <input id="seed" type="number" min="0" placeholder="random"></label>
  <label><input id="use_session" type="checkbox"> continue a session</label>
  <label>API key <input id="api_key" type="password" size="10"></label>
</div>
<div class="row" id="sampler">
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1"></label>
  <label>top-k <input id="top_k" type="number" min="0" step="1"></label>
  <label>top-p <input id="top_p" type="number" min="0" max="1" step="0.05"></label>
  <label>min-p <input id="min_p" type="number" min="0" max="1" step="0.01"></label>
  <label>repetition penalty <input id="repetition_penalty" type="number" min="0" step="0.05"></label>
</div>
<div class="row">
  <button id="go">Generate</button>
  <button id="stop" disabled>Stop</button>
  <button id="new_session">New session</button>
  <span id="session_info"></span>
</div>
<div id="out"></div>
<div id="stats"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let controller = null, session = null;
// The sampler's fields; an empty one is left to the server, whose defaults (the same as the
// command line's) are shown as the placeholders once /v1/models has named them.
const samplerFields = ["temperature", "top_k", "top_p", "min_p", "repetition_penalty"];

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function api(method, path, body) {
  const res = await fetch(path, { method, headers: headers(), body: body && JSON.stringify(body) });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((data.error && data.error.message) || res.statusText);
  return data;
}

let modelShown = false;
function loadModel() {
  if (modelShown) return;
  api("GET", "/v1/models").then((d) => {
    const m = d.data[0];
    $("model").textContent = "model " + m.id + " · state " +
      (m.meta.state_bytes / 1e6).toFixed(2) + " MB per sequence, whatever its length";
    const defaults = m.meta.default_sampler || {};
    for (const f of samplerFields) if (f in defaults) $(f).placeholder = String(defaults[f]);
    $("notice").textContent = "";
    modelShown = true;
  }).catch((e) => {
    $("model").textContent = "model: not known yet";
    $("notice").textContent = "cannot describe the model: " + e.message;
  });
}
loadModel();
$("api_key").addEventListener("change", loadModel);

function showSession() {
  $("session_info").textContent = session && $("use_session").checked ? "session " + session : "";
}

async function newSession() {
  if (session) await api("DELETE", "/v1/sessions/" + session).catch(() => {});
  session = (await api("POST", "/v1/sessions", {})).id;
  $("use_session").checked = true;
  showSession();
  $("out").textContent = "";
}

$("new_session").onclick = () => newSession().catch((e) => showError(e.message));
$("use_session").onchange = showSession;
$("stop").onclick = () => controller && controller.abort();

function appendSpan(className, text) {
  const span = document.createElement("span");
  span.className = className;
  span.textContent = text;
  $("out").appendChild(span);
  return span;
}
function showError(message) { appendSpan("error", "\n" + message); }

function requestBody(prompt) {
  const body = { prompt, max_tokens: Number($("max_tokens").value) || 200, stream: true,
                 stream_options: { include_usage: true } };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  for (const f of samplerFields) if ($(f).value !== "") body[f] = Number($(f).value);
  return body;
}

// Reads the server-sent events of a completion, calling onEvent with each parsed message.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (true) {
    const chunk = await reader.read();
    if (chunk.done) return;
    buffer += decoder.decode(chunk.value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;  // ": keep-alive" comments
        if (line === "data: [DONE]") return;
        const msg = JSON.parse(line.slice(6));
        if (msg.error) throw new Error(msg.error.message);
        onEvent(msg);
      }
    }
  }
}

$("go").onclick = async () => {
  loadModel();
  const prompt = $("prompt").value;
  const body = requestBody(prompt);
  const stats = $("stats");
  stats.textContent = "";  // a run's numbers never outlive it
  delete stats.dataset.done;
  delete stats.dataset.stopped;
  try {
    if ($("use_session").checked) {
      if (!session) await newSession();
      body.session = session;
    } else {
      $("out").textContent = "";
    }
  } catch (e) { showError(e.message); return; }
  appendSpan("prompt", prompt);
  const text = appendSpan("completion", "");
  controller = new AbortController();
  $("go").disabled = true; $("stop").disabled = false;
  const t0 = performance.now();
  let first = 0, pieces = 0, seed;
  const rate = (tokens, secs) => (secs > 0 ? ((tokens - 1) / secs).toFixed(1) : "–");
  try {
    const res = await fetch("/v1/completions", { method: "POST", headers: headers(),
                                                 body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      const data = await res.json().catch(() => ({}));
      throw new Error((data.error && data.error.message) || res.statusText);
    }
    await readEvents(res, (msg) => {
      const now = performance.now();
      if (msg.seed !== undefined) seed = msg.seed;  // on the last chunk: the seed drawn, if none
      if (msg.choices && msg.choices.length && msg.choices[0].text) {
        if (!first) first = now;
        pieces += 1;
        text.textContent += msg.choices[0].text;
        stats.textContent = pieces + " tokens · " + rate(pieces, (now - first) / 1000) +
          " tokens/s · first token after " + (first - t0).toFixed(0) + " ms";
      }
      if (msg.usage) {
        const u = msg.usage;
        stats.textContent = u.completion_tokens + " tokens · " +
          rate(u.completion_tokens, (now - (first || now)) / 1000) +
          " tokens/s · first token after " + (first - t0).toFixed(0) + " ms · prompt " +
          u.prompt_tokens + " new tokens" + (msg.session ? " · session holds " +
          msg.session.tokens + " tokens" : "") + (seed !== undefined ? " · seed " + seed : "");
      }
    });
    stats.dataset.done = "1";
  } catch (e) {
    if (e.name === "AbortError") {
      appendSpan("stopped", " [stopped]");
      stats.textContent = "stopped after " + pieces + " tokens" +
        (body.session ? " (the session keeps the text before this run)" : "");
      stats.dataset.stopped = "1";
    } else {
      stats.textContent = "";
      showError(e.message);
    }
  } finally {
    $("go").disabled = false; $("stop").disabled = true; controller = null;
  }
};
</script>
</body>
</html>
)PAGE";

/// The Content-Security-Policy of the page: its own API only, its one inline script and style
/// allowed by their SHA-256 (so no other script runs, whatever text a completion shows), never
/// in a frame. Editing the <script> or <style> above changes their hash: the hostile-client
/// test's case 17 (tests/server/hostile/api_cases.py) computes both and names the new values.
inline const char* const kPageSecurityPolicy =
    "default-src 'self'; script-src 'sha256-ktmtm21fwzw7Yr++o+4+vFCOc/61G62PIULILmzvoyY='; "
    "style-src 'sha256-+Iw6qqk/99A7JddUGs/AL/MRftCaVxomnz+G74Dn/r4='; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'";

}  // namespace retnet::serve
