"""GET /metrics (case "M"): the scrape parses as Prometheus's text format 0.0.4 and its counts
move by exactly what was sent: answers by status (the HTTP layer's own 413 too), tokens read and
generated, a stream open while it runs, sessions in memory and on disk, one time to first token
per completion answered."""
import http.client
import json
import math
import re
import socket
import time

from harness import Case, status_of

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
KEY = "metrics-key"

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABELS = r'\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\}'
_VALUE = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|Inf)|NaN"
_SAMPLE = re.compile(rf"({_NAME})({_LABELS})? ({_VALUE})")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)")
_HELP = re.compile(rf"# HELP ({_NAME}) .*")


def parse(text):
    """{(name, labels text): value} of a scrape, and {family: type}. Raises AssertionError on a
    line that is neither a comment nor a sample, and on a sample whose family has no # TYPE."""
    types, samples = {}, {}
    assert text.endswith("\n"), "the scrape does not end with a newline"
    for line in text.splitlines():
        if line.startswith("# HELP"):
            assert _HELP.fullmatch(line), f"a bad HELP line: {line!r}"
            continue
        m = _TYPE.fullmatch(line)
        if m:
            assert m.group(1) not in types, f"two TYPE lines for {m.group(1)}"
            types[m.group(1)] = m.group(2)
            continue
        m = _SAMPLE.fullmatch(line)
        assert m, f"not a line of the text format: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and types.get(base) == "histogram":
                family = base
        assert family in types, f"no # TYPE before {line!r}"
        samples[(name, labels)] = float(value)
    return samples, types


def scrape(srv):
    status, headers, body = srv.request("GET", "/metrics")
    assert status == 200, f"GET /metrics got {status}: {body[:200]!r}"
    assert headers.get("content-type") == CONTENT_TYPE, headers.get("content-type")
    return parse(body.decode())


def value(samples, name, labels=""):
    return samples.get((name, labels), 0.0)


def answers(samples, status):
    return value(samples, "retnet_http_responses_total", f'{{status="{status}"}}')


def histogram_buckets(samples, name):
    """[(le, cumulative count)] in bound order, +Inf last."""
    out = []
    for (n, labels), v in samples.items():
        if n == name + "_bucket":
            le = re.fullmatch(r'\{le="([^"]*)"\}', labels).group(1)
            out.append((math.inf if le == "+Inf" else float(le), v))
    return sorted(out)


def stream_while_scraping(srv, scrapes):
    """A streamed completion; /metrics scraped once its first event is in. Returns (the scrape
    taken while it ran, its usage)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    # Long enough (a few seconds of the demo model, and more than the sockets' buffers hold)
    # that the stream is still running when the scrape arrives.
    body = dict(prompt="ROMEO:", max_tokens=4000, stream=True, seed=3,
                stream_options={"include_usage": True})
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, f"the stream got {r.status}"
    first = r.readline()
    assert first.startswith(b"data: "), first
    during, _ = scrape(srv)
    scrapes.append(1)
    usage = None
    for line in r.read().decode().split("\n"):
        if line.startswith("data: {") and '"usage"' in line:
            usage = json.loads(line[6:]).get("usage") or usage
    c.close()
    assert usage, "the stream sent no usage chunk"
    return during, usage


def settled(srv, done, within_s=5):
    """The first scrape for which done(samples) holds, or the last one after `within_s` s; and
    how many scrapes came before it."""
    deadline, before = time.time() + within_s, 0
    while True:
        samples, _ = scrape(srv)
        if done(samples) or time.time() > deadline:
            return samples, before
        before += 1
        time.sleep(0.05)


def leave_a_stream(srv):
    """A long stream whose client leaves once its first event is in."""
    body = json.dumps(dict(prompt="ROMEO:", max_tokens=2000, stream=True)).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
              + KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"data: " not in got:
        piece = s.recv(4096)
        assert piece, f"the stream ended before its first event: {got[:300]!r}"
        got += piece
    s.close()


def metrics_scrape(h):
    srv = h.start(api_key=KEY, sessions_dir=h.tmp / "sessions")
    status, _, _ = srv.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"})
    assert status == 401, f"/metrics with a wrong key got {status}"
    before, types = scrape(srv)
    scrapes = []  # scrapes after `before`, each counted as a 200 before the next scrape
    for name, kind in [("retnet_http_responses_total", "counter"),
                       ("retnet_prompt_tokens_total", "counter"),
                       ("retnet_generated_tokens_total", "counter"),
                       ("retnet_queue_length", "gauge"), ("retnet_requests_prefilling", "gauge"),
                       ("retnet_requests_decoding", "gauge"), ("retnet_active_streams", "gauge"),
                       ("retnet_sessions_in_memory", "gauge"), ("retnet_sessions_on_disk", "gauge"),
                       ("retnet_time_to_first_token_seconds", "histogram")]:
        assert types.get(name) == kind, f"{name} is {types.get(name)}, not {kind}"

    status, _, _ = srv.request("POST", "/v1/sessions", {"id": "m1"})
    assert status == 201, f"creating a session got {status}"
    status, done = srv.completion(prompt="ROMEO:", max_tokens=5, seed=1, session="m1")
    assert status == 200, f"a completion got {status}: {done}"
    status, bad = srv.completion(max_tokens=-1)
    assert status == 400, f"max_tokens -1 got {status}: {bad}"
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nAuthorization: Bearer " + KEY.encode() + b"\r\nContent-Length: 70000\r\n\r\n")
    got = status_of(srv.raw(head, [b"x" * 4096]))
    assert got == 413, f"a body over --max-body got {got}"
    during, stream_usage = stream_while_scraping(srv, scrapes)
    assert value(during, "retnet_active_streams") == 1, \
        f"active streams while one runs: {value(during, 'retnet_active_streams')}"

    # The stream's end reaches the counts once its last chunk is written: wait for it.
    after, polls = settled(srv, lambda m: value(m, "retnet_active_streams") == 0)
    scrapes += [1] * polls
    assert value(after, "retnet_active_streams") == 0, "a finished stream is still counted"

    def moved(name, labels=""):
        return value(after, name, labels) - value(before, name, labels)

    want = {200: 1 + 1 + 1 + len(scrapes), 201: 1, 400: 1, 413: 1}  # first scrape, completion,
    for code, n in want.items():                                  # stream, scrapes
        got = answers(after, code) - answers(before, code)
        assert got == n, f"answers with status {code} moved by {got}, not {n}"
    assert answers(after, 401) >= 1, "the 401 of /metrics without the key is not counted"
    prompt = done["usage"]["prompt_tokens"] + stream_usage["prompt_tokens"]
    generated = done["usage"]["completion_tokens"] + stream_usage["completion_tokens"]
    assert moved("retnet_prompt_tokens_total") == prompt, \
        f"prompt tokens moved by {moved('retnet_prompt_tokens_total')}, not {prompt}"
    assert moved("retnet_generated_tokens_total") == generated, \
        f"generated tokens moved by {moved('retnet_generated_tokens_total')}, not {generated}"
    assert moved("retnet_requests_total", '{outcome="completed"}') == 2
    ttft = "retnet_time_to_first_token_seconds"
    assert moved(ttft + "_count") == 2, \
        f"{moved(ttft + '_count')} first tokens recorded for 2 completions answered"
    assert value(after, ttft + "_sum") > 0
    buckets = histogram_buckets(after, ttft)
    assert buckets and buckets[-1][0] == math.inf, "no +Inf bucket"
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), f"buckets not cumulative: {buckets}"
    assert counts[-1] == value(after, ttft + "_count"), "+Inf bucket differs from the count"
    for gauge in ("retnet_queue_length", "retnet_requests_prefilling",
                  "retnet_requests_decoding"):
        assert value(after, gauge) == 0, f"{gauge} is {value(after, gauge)} on an idle server"
    assert value(after, "retnet_sessions_in_memory") == 1
    assert value(after, "retnet_sessions_on_disk") == 1

    # A client that leaves a stream: the stream is no longer counted, its job is cancelled, and
    # its first token was recorded.
    leave_a_stream(srv)
    cancelled = '{outcome="cancelled"}'
    gone, _ = settled(srv, lambda m: value(m, "retnet_active_streams") == 0 and
                      value(m, "retnet_requests_total", cancelled) >
                      value(after, "retnet_requests_total", cancelled))
    assert value(gone, "retnet_active_streams") == 0, "a stream whose client left is counted"
    assert value(gone, "retnet_requests_total", cancelled) - \
        value(after, "retnet_requests_total", cancelled) == 1, "the stream left is not cancelled"
    assert value(gone, ttft + "_count") - value(after, ttft + "_count") == 1
    assert value(gone, "retnet_requests_decoding") == 0
    srv.normal_ok()


CASES = [Case("M", "GET /metrics in Prometheus text format", metrics_scrape)]
