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
</style>
</head>
<body>
<h1>retnet serve</h1>
<div id="model">loading model…</div>
<textarea id="prompt" rows="4" placeholder="Type a prompt">ROMEO:</textarea>
<div class="row">
  <label>max tokens <input id="max_tokens" type="number" value="200" min="1"></label>
  <label>temperature <input id="temperature" type="number" value="0.8" min="0" max="2" step="0.1"></label>
  <label>seed <input id="seed" type="number" placeholder="random"></label>
  <label><input id="use_session" type="checkbox"> continue a session</label>
  <label>API key <input id="api_key" type="password" size="10"></label>
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
    modelShown = true;
  }).catch((e) => { $("model").textContent = e.message; });
}
loadModel();
$("api_key").addEventListener("change", loadModel);

async function newSession() {
  if (session) await api("DELETE", "/v1/sessions/" + session).catch(() => {});
  session = (await api("POST", "/v1/sessions", {})).id;
  $("session_info").textContent = "session " + session;
  $("out").textContent = "";
}

$("new_session").onclick = () => newSession().catch((e) => showError(e.message));
$("stop").onclick = () => controller && controller.abort();

function showError(message) {
  const span = document.createElement("span");
  span.className = "error";
  span.textContent = "\n" + message;
  $("out").appendChild(span);
}

$("go").onclick = async () => {
  loadModel();
  const prompt = $("prompt").value;
  const body = { prompt, max_tokens: Number($("max_tokens").value) || 200,
                 temperature: Number($("temperature").value), stream: true,
                 stream_options: { include_usage: true } };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  const out = $("out");
  try {
    if ($("use_session").checked) {
      if (!session) await newSession();
      body.session = session;
    } else {
      out.textContent = "";
    }
  } catch (e) { showError(e.message); return; }
  const p = document.createElement("span");
  p.className = "prompt";
  p.textContent = prompt;
  out.appendChild(p);
  const text = document.createElement("span");
  text.className = "completion";
  out.appendChild(text);
  controller = new AbortController();
  $("go").disabled = true; $("stop").disabled = false;
  const t0 = performance.now();
  let first = 0, pieces = 0;
  const stats = $("stats");
  try {
    const res = await fetch("/v1/completions", { method: "POST", headers: headers(),
                                                 body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      const data = await res.json().catch(() => ({}));
      throw new Error((data.error && data.error.message) || res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", done = false;
    while (!done) {
      const chunk = await reader.read();
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;  // ": keep-alive" comments
          const data = line.slice(6);
          if (data === "[DONE]") { done = true; break; }
          const msg = JSON.parse(data);
          if (msg.error) throw new Error(msg.error.message);
          const now = performance.now();
          if (msg.choices && msg.choices.length && msg.choices[0].text) {
            if (!first) first = now;
            pieces += 1;
            text.textContent += msg.choices[0].text;
            const secs = (now - first) / 1000;
            stats.textContent = pieces + " tokens · " +
              (secs > 0 ? ((pieces - 1) / secs).toFixed(1) : "–") + " tokens/s · first token after " +
              (first - t0).toFixed(0) + " ms";
          }
          if (msg.usage) {
            const u = msg.usage, secs = (now - (first || now)) / 1000;
            stats.textContent = u.completion_tokens + " tokens · " +
              (secs > 0 ? ((u.completion_tokens - 1) / secs).toFixed(1) : "–") +
              " tokens/s · first token after " + (first - t0).toFixed(0) + " ms · prompt " +
              u.prompt_tokens + " new tokens" + (msg.session ? " · session holds " +
              msg.session.tokens + " tokens" : "");
          }
        }
      }
    }
    stats.dataset.done = "1";
  } catch (e) {
    if (e.name !== "AbortError") showError(e.message);
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
    "default-src 'self'; script-src 'sha256-XJCfFdUeA/ZO/ffbGVNAtnA49cqDHu1Dv05PzdKXEGw='; "
    "style-src 'sha256-5wD47/0J8o9uHKlUtZvvMZmJ97xJ9ka+xmhHs7NZV1k='; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'";

}  // namespace retnet::serve
