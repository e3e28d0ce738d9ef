"""Cases of authentication, origin and request values (causes 9, 11, 12, 13 and the auth parts
of 17): an empty key refused at start-up, --api-key-file, the warning for a non-loopback host
without a key, the Host / Origin / Content-Type checks without a key, CORS only for --cors
origins, JSON sent as form data, numbers that overflow a double, a tiny top_p, HEAD as GET for
the key, and the page's security headers."""
import base64
import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

from harness import Case

REPO = Path(__file__).resolve().parents[3]
COMPLETION = {"prompt": "ROMEO:", "max_tokens": 2, "seed": 1}


def refused_at_start(h, args, env=None):
    """(exit status, stderr) of a `retnet serve` that must not start."""
    cmd = [str(h.cli), "serve", "-m", str(h.model), "--host", "127.0.0.1", "--port", "0"] + args
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env=env, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`{' '.join(args)}` started a server instead of refusing")
    return p.returncode, p.stderr


def assert_refused(h, args, wanted, env=None):
    rc, err = refused_at_start(h, args, env)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and wanted in lines[0], \
        f"{args}: wanted exit 2 and one line with {wanted!r}, got {rc}: {err.strip()[:300]!r}"


def post(srv, body, headers=None, path="/v1/completions"):
    """POST of bytes (or a dict as JSON text) with exactly these headers (plus Host)."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    h = {"Host": f"127.0.0.1:{srv.port}"}
    h.update(headers or {})
    status, hdrs, out = srv.request("POST", path, body, h)
    return status, hdrs, out


def error_of(body):
    try:
        return json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return {"message": body[:200].decode(errors="replace"), "param": None}


def expect(got, status, needle, what):
    st, _, body = got
    err = error_of(body)
    assert st == status and needle in err["message"], \
        f"{what}: wanted {status} naming {needle!r}, got {st}: {err['message']!r}"
    return err


def cors_headers(hdrs):
    return {k: v for k, v in hdrs.items() if k.startswith("access-control-")}


def key_file(h, text):
    path = h.tmp / "key"
    path.write_text(text)
    os.chmod(path, 0o600)
    return str(path)


# ---------------------------------------------------------------- 9


def empty_key_refused(h):
    assert_refused(h, ["--api-key", ""], "--api-key is empty")
    env = dict(os.environ, RETNET_API_KEY="")
    assert_refused(h, [], "RETNET_API_KEY is set but empty", env=env)
    assert_refused(h, ["--api-key-file", key_file(h, "\n")], "is empty")
    assert_refused(h, ["--api-key", "a", "--api-key-file", key_file(h, "b\n")], "not both")
    assert "warning" not in h.default.log(), "a loopback server without a key warned"

    srv = h.start(flags=["--api-key-file", key_file(h, "s3cret\n")])
    st, _, _ = srv.request("POST", "/v1/completions", COMPLETION)
    assert st == 401, f"without the key of --api-key-file: {st}"
    st, _, _ = srv.request("POST", "/v1/completions", COMPLETION,
                           {"Authorization": "Bearer s3cret\n".strip()})
    assert st == 200, f"with the key of --api-key-file (newline stripped): {st}"
    srv.api_key = "s3cret"
    srv.normal_ok()
    srv.stop()

    # A non-loopback --host without a key: one warning line before "listening on".
    cmd = [str(h.cli), "serve", "-m", str(h.model), "--host", "0.0.0.0", "--port", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    try:
        deadline = time.time() + 60
        for line in p.stderr:
            log.append(line)
            if "listening on" in line or time.time() > deadline:
                break
    finally:
        p.terminate()
        p.wait(timeout=30)
    warnings = [l for l in log if "warning" in l]
    assert len(warnings) == 1 and "0.0.0.0" in warnings[0] and "API key" in warnings[0], \
        f"--host 0.0.0.0 without a key: wanted one warning line, got {''.join(log)!r}"
    h.default.normal_ok()


# ---------------------------------------------------------------- 11


def host_origin_content_type(h):
    srv = h.default
    port = srv.port
    expect(post(srv, COMPLETION, {"Host": "evil.example", "Content-Type": "application/json"}),
           403, "'evil.example'", "a foreign Host")
    expect(post(srv, COMPLETION, {"Host": f"rebound.example:{port}",
                                  "Content-Type": "application/json"}),
           403, f"'rebound.example:{port}'", "a foreign Host with the port")
    # The CSRF: text/plain with a foreign Origin and Host.
    expect(post(srv, COMPLETION, {"Host": "evil.example", "Origin": "http://evil.example",
                                  "Content-Type": "text/plain"}), 403, "evil.example", "CSRF")
    expect(post(srv, COMPLETION, {"Content-Type": "text/plain"}), 415, "'text/plain'",
           "a text/plain POST")
    expect(post(srv, COMPLETION, {"Content-Type": "application/json",
                                  "Origin": "http://evil.example"}),
           403, "'http://evil.example'", "a POST from another origin")
    for host in ["localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"]:
        st, _, body = srv.request("GET", "/v1/models", headers={"Host": host})
        assert st == 200, f"Host {host}: {st} {body[:200]!r}"
    for headers in [{"Content-Type": "application/json; charset=utf-8"},
                    {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}"}]:
        st, _, body = post(srv, COMPLETION, headers)
        assert st == 200, f"{headers}: {st} {body[:200]!r}"

    # CORS off: no Access-Control-* on answers, a preflight not granted.
    st, hdrs, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://evil.example"})
    assert st == 200 and not cors_headers(hdrs), f"CORS off, yet {cors_headers(hdrs)}"
    st, hdrs, _ = srv.request("OPTIONS", "/v1/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert st != 204 and not cors_headers(hdrs), f"CORS off, preflight {st} {cors_headers(hdrs)}"
    assert_refused(h, ["--cors", "http://app.example/path"], "is not an origin")

    app = "http://app.example:3000"
    cors = h.start(flags=["--cors", app, "--cors", "https://other.example"])
    st, hdrs, _ = cors.request("OPTIONS", "/v1/completions", headers={
        "Origin": app, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert st == 204 and hdrs.get("access-control-allow-origin") == app and \
        "Content-Type" in hdrs.get("access-control-allow-headers", ""), \
        f"--cors preflight: {st} {cors_headers(hdrs)}"
    st, hdrs, _ = post(cors, COMPLETION, {"Content-Type": "application/json", "Origin": app})
    assert st == 200 and hdrs.get("access-control-allow-origin") == app, \
        f"--cors POST: {st} {cors_headers(hdrs)}"
    expect(post(cors, COMPLETION, {"Content-Type": "application/json",
                                   "Origin": "http://evil.example"}),
           403, "'http://evil.example'", "--cors, a POST from another origin")
    cors.normal_ok()
    cors.stop()

    # A key holder passes the Host and Content-Type checks; without the key it is 401.
    keyed = h.start(api_key="k")
    st, _, _ = post(keyed, COMPLETION, {"Host": "model.example", "Content-Type": "text/plain",
                                        "Authorization": "Bearer k"})
    assert st == 200, f"a key holder with another Host: {st}"
    st, _, _ = post(keyed, COMPLETION, {"Host": "evil.example", "Content-Type": "text/plain",
                                        "Authorization": "Bearer wrong"})
    assert st == 401, f"a wrong key with another Host: {st}"
    keyed.stop()
    srv.normal_ok()


# ---------------------------------------------------------------- 12


def form_encoded_json(h):
    body = dict(COMPLETION, model="x" * 9000)  # over 8 KB, as `curl -d` would send it
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    keyed = h.start(api_key="k")
    st, _, out = post(keyed, body, dict(form, Authorization="Bearer k"))
    assert st == 200, f"with a key, JSON sent as form data: {st} {out[:200]!r}"
    keyed.normal_ok()
    keyed.stop()
    expect(post(h.default, body, form), 415, "-H 'Content-Type: application/json'",
           "without a key, JSON sent as form data")

    # Every curl example that sends a body says that it is JSON.
    for doc in [REPO / "docs" / "SERVER.md", REPO / "README.md"]:
        for line in doc.read_text().splitlines():
            if line.lstrip().startswith("curl") and re.search(r"\s-d\s", line):
                assert "Content-Type: application/json" in line, f"{doc.name}: {line}"
    h.default.normal_ok()


# ---------------------------------------------------------------- 13


def overflowing_numbers(h):
    srv = h.default
    js = {"Content-Type": "application/json"}
    for field in ["max_tokens", "temperature", "top_p", "top_k", "seed", "repetition_penalty"]:
        text = '{"prompt":"ROMEO:","%s":1e999}' % field
        err = expect(post(srv, text.encode(), js), 400, f"'{field}'", f"{field}: 1e999")
        assert err.get("param") == field, f"{field}: 1e999 has param {err.get('param')!r}"
    expect(post(srv, b'{"prompt":"ROMEO:","temperature":-1e999}', js), 400, "'temperature'",
           "temperature: -1e999")
    expect(post(srv, b'{"prompt":[1,2,1e999]}', js), 400,
           "a number in the request overflows", "a token id 1e999")
    expect(post(srv, b'{"prompt":"ROMEO:","max_tokens":2}', {"Content-Type": "text/plain"}),
           415, "Content-Type", "sanity: the gate runs first")

    # top_p 1e-300 keeps the most likely token: the greedy text.
    tiny = dict(COMPLETION, max_tokens=8, top_p=1e-300, temperature=1.5)
    st, tiny_body = srv.completion(**tiny)
    assert st == 200, f"top_p 1e-300: {st} {tiny_body}"
    st, greedy = srv.completion(**dict(COMPLETION, max_tokens=8, temperature=0))
    assert st == 200 and tiny_body["choices"][0]["text"] == greedy["choices"][0]["text"], \
        f"top_p 1e-300 gave {tiny_body['choices'][0]['text']!r}, greedy {greedy}"
    srv.normal_ok()


# ---------------------------------------------------------------- 17


def page_hash(page, tag):
    found = re.findall(rf"<{tag}>(.*?)</{tag}>".encode(), page, re.S)
    assert len(found) == 1, f"the page has {len(found)} inline <{tag}> blocks"
    return "'sha256-" + base64.b64encode(hashlib.sha256(found[0]).digest()).decode() + "'"


def head_key_file_page_headers(h):
    srv = h.start(flags=["--api-key-file", key_file(h, "hidden-key\n")])
    for path in ["/", "/health"]:
        for method in ["GET", "HEAD"]:
            st, _, _ = srv.request(method, path)
            assert st == 200, f"{method} {path} with a key set: {st} (open like GET)"
    st, _, _ = srv.request("HEAD", "/v1/models")
    assert st == 401, f"HEAD /v1/models without the key: {st}"
    cmdline = Path(f"/proc/{srv.pid}/cmdline").read_bytes()
    assert b"hidden-key" not in cmdline, "the key of --api-key-file is on the command line"

    st, hdrs, page = srv.request("GET", "/")
    csp = hdrs.get("content-security-policy", "")
    for part in ["default-src 'self'", "frame-ancestors 'none'",
                 "script-src " + page_hash(page, "script"), "style-src " + page_hash(page, "style")]:
        assert part in csp, \
            f"the page's Content-Security-Policy lacks {part} (tools/serve/page.hpp): {csp!r}"
    wanted = {"x-frame-options": "DENY", "referrer-policy": "no-referrer",
              "x-content-type-options": "nosniff"}
    for name, value in wanted.items():
        assert hdrs.get(name) == value, f"the page's {name} is {hdrs.get(name)!r}"
    srv.api_key = "hidden-key"
    srv.normal_ok()
    srv.stop()


CASES = [
    Case("9", "an empty key is refused at start-up; --api-key-file; a warning for a "
              "non-loopback host without a key", empty_key_refused),
    Case("11", "without a key: a foreign Host 403, a foreign Origin 403, a non-JSON POST 415; "
               "CORS only for --cors", host_origin_content_type),
    Case("12", "JSON sent as form data: read with a key, 415 with a hint without", form_encoded_json),
    Case("13", "numbers that overflow a double are 400 naming the field; top_p 1e-300 is greedy",
         overflowing_numbers),
    Case("17", "HEAD follows GET for the key; --api-key-file hides the key from ps; the page's "
               "security headers", head_key_file_page_headers),
]
