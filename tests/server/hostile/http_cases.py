"""Cases of the HTTP layer (causes 1, 2, 3, 5, 10, 16 and the HTTP parts of 17): bodies and
headers over their limits, slow and idle connections, long streams, Range on the page, framing,
a busy port, Expect: 100-continue, HEAD and the nosniff header."""
import json
import re
import socket
import subprocess
import threading
import time
import zlib

import harness
from harness import Case, status_of

JS = b'{"prompt":"ROMEO:","max_tokens":2}'
MIB = 1 << 20


# ---- helpers shared by the cases of this module and scheduling_cases.py ----

def server_flags(cli):
    """The flags `retnet serve --help` lists."""
    out = subprocess.run([str(cli), "serve", "--help"], capture_output=True, text=True,
                         timeout=30)
    return {w for w in (out.stdout + out.stderr).split() if w.startswith("--")}


def start_with(h, **overrides):
    """A server of its own: the test's default flags with some values replaced or added
    (max_connections=200 → --max-connections 200). Flags the binary does not list are left out,
    so that these cases can also be run against a server that lacks those limits, to show that
    they fail there."""
    if getattr(h, "_known_flags", None) is None:
        h._known_flags = server_flags(h.cli)
    flags = list(harness.DEFAULT_FLAGS)
    for key, value in overrides.items():
        name = "--" + key.replace("_", "-")
        if name in flags:
            flags[flags.index(name) + 1] = str(value)
        else:
            flags += [name, str(value)]
    pairs = [(flags[i], flags[i + 1]) for i in range(0, len(flags), 2)]
    kept = [x for name, value in pairs if name in h._known_flags for x in (name, value)]
    return h.start(kept, defaults=False)


def post(extra=b"", body=b"", key=None):
    """A raw POST /v1/completions with the header lines `extra`, then `body`."""
    auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + auth + extra + b"\r\n" + body)


def get(path=b"/health", extra=b"", method=b"GET"):
    return (method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra +
            b"Connection: close\r\n\r\n")


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def flood(srv, head, piece, total, wait=30.0):
    """Sends `head`, then `piece` over and over up to `total` bytes, from a thread, while this
    thread reads the answer; the sending stops as soon as the server has answered or closed.
    Returns (bytes received, bytes sent when the answer was complete)."""
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(wait)
    stop = threading.Event()
    sent = [0]

    def send():
        try:
            s.sendall(head)
            while sent[0] < total and not stop.is_set():
                s.sendall(piece)
                sent[0] += len(piece)
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    out = harness.recv_all(s)
    stop.set()
    at_answer = sent[0]
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
    sender.join(10)
    return out, at_answer


def keyed_server(h):
    """A server with an API key ("k"), shared by the cases of this module that need one."""
    srv = getattr(h, "_http_keyed", None)
    if srv is None or not srv.alive():
        srv = h._http_keyed = h.start(api_key="k")
    return srv


def header_block(raw):
    return raw.split(b"\r\n\r\n", 1)[0].decode(errors="replace")


# ---- cause 1: bodies over the limit, chunked or compressed ----

def body_limit_chunked(h):
    srv = h.default
    head = post(b"Transfer-Encoding: chunked\r\n")
    with h.memory_bound(srv, 50):
        got = status_of(srv.raw(head, [chunk(b"x" * 16384)] * 64 + [b"0\r\n\r\n"]))
    assert got == 413, f"a 1 MiB chunked body (--max-body 64 KiB) got {got}"
    srv.normal_ok()


def body_limit_chunked_200mib(h):
    srv = h.default
    with h.memory_bound(srv, 50):
        out, sent = flood(srv, post(b"Transfer-Encoding: chunked\r\n"), chunk(b"x" * 65536),
                          200 * MIB)
    print(f"     answered after {sent / MIB:.0f} MiB sent")
    assert status_of(out) == 413, f"a 200 MiB chunked body got {status_of(out)}: {out[:200]!r}"
    assert sent < 200 * MIB, "the 413 came only after the whole 200 MiB body was sent"
    srv.normal_ok()


def body_gzip(h):
    # 73 KB of gzip that inflates to 72 MiB, under the default --max-body of 1 MiB.
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip format
    body = packer.compress(b'{"prompt":"')
    body += b"".join(packer.compress(b" " * MIB) for _ in range(72))
    body += packer.compress(b'","max_tokens":1}') + packer.flush()
    assert 70000 < len(body) < 80000, len(body)
    srv = start_with(h, max_body=MIB)
    with h.memory_bound(srv, 50):
        out = srv.raw(post(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % len(body), body))
    assert status_of(out) == 415, \
        f"a {len(body) // 1000} KB gzip body got {status_of(out)}: {out[:300]!r}"
    srv.normal_ok()


# ---- cause 2: headers over the limit ----

def header_limits(h):
    srv = h.default
    one_long = srv.raw(get(extra=b"X-A: " + b"a" * 5000 + b"\r\n"))
    assert status_of(one_long) == 431, f"a 5 KB header line got {status_of(one_long)}"
    many = srv.raw(get(extra=b"X-A: a\r\n" * 1000))
    assert status_of(many) == 431, f"1,000 header lines (8 KB) got {status_of(many)}"
    srv.normal_ok()


def header_16mb(h):
    srv = h.default
    with h.memory_bound(srv, 50):
        out, sent = flood(srv, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                          b"X-A: a\r\n" * 8192, 16 * MIB)
    print(f"     answered after {sent / MIB:.1f} MiB sent")
    assert status_of(out) == 431, f"16 MB of headers got {status_of(out)}: {out[:200]!r}"
    srv.normal_ok()


# ---- cause 3: slow, idle and many connections; long streams ----

def slow_header_and_body(h):
    srv = h.default
    got = {}

    def run(name, data, wait):
        got[name] = status_of(srv.raw(data, wait=wait))

    half_header = b"GET /health HTTP/1.1\r\nHost: x\r\n"
    half_body = post(b"Content-Length: 100\r\n", b"{")
    threads = [threading.Thread(target=run, args=("header", half_header, 6)),
               threading.Thread(target=run, args=("body", half_body, 7))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"header": 408, "body": 408}, \
        f"a header not finished in --header-timeout 2 s got {got['header']}, a body not " \
        f"finished in --body-timeout 3 s got {got['body']} (wanted 408 for both)"
    srv.normal_ok()


def still_open(sockets):
    """How many of `sockets` the server has not closed (nothing to read, no end of stream)."""
    count = 0
    for s in sockets:
        s.setblocking(False)
        try:
            count += s.recv(1, socket.MSG_PEEK) != b""  # data: an answer, hence a closing
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def idle_and_slow_connections(h):
    # Fewer handler threads than connections held: an idle socket must not take one.
    srv = start_with(h, http_threads=4, max_connections=200, header_timeout=10)
    idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(64)]
    slow = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(64)]
    for s in slow:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    stop = threading.Event()

    def dribble():
        while not stop.wait(0.5):
            for s in slow:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    dribbler = threading.Thread(target=dribble, daemon=True)
    dribbler.start()
    try:
        with h.memory_bound(srv, 50):
            time.sleep(0.5)
            for _ in range(3):
                srv.normal_ok()
                time.sleep(0.3)
        held = still_open(idle + slow)
        assert held == 128, f"only {held} of 128 idle and slow connections were still open " \
                            "during the probes (the check needs them held)"
    finally:
        stop.set()
        dribbler.join()
        for s in idle + slow:
            s.close()
    srv.normal_ok()


def too_many_connections(h):
    srv = h.default  # --max-connections 40
    held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(60)]
    try:
        for s in held:
            s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(0.3)
        held[-1].settimeout(2)
        try:
            last = held[-1].recv(1000)
        except OSError:
            last = b""
        assert status_of(last) == 503, f"the 60th connection (limit 40) got {last[:100]!r}"
        assert "retry-after: " in header_block(last).lower(), \
            f"the 503 has no Retry-After: {header_block(last)!r}"
    finally:
        for s in held:
            s.close()
    time.sleep(0.5)
    out = srv.raw(get())
    assert status_of(out) == 200, f"once they are gone, GET /health got {status_of(out)}"
    srv.normal_ok()


def engine_counts(srv, timeout=2.0):
    """/health's "requests" counts; None when /health is not answered within `timeout`."""
    try:
        status, _, body = srv.request("GET", "/health", timeout=timeout)
    except OSError:
        return None
    assert status == 200, f"GET /health got {status}"
    return json.loads(body)["requests"]


def long_streams(h):
    # Room in the batch for all of them and the probe, so that only the HTTP layer is tested.
    srv = start_with(h, max_connections=200, max_batch=72)
    body = b'{"prompt":"ROMEO:","max_tokens":4096,"stream":true}'
    streams = []
    for _ in range(64):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(post(b"Content-Length: %d\r\n" % len(body), body))
        streams.append(s)
    heads = [b""] * len(streams)
    stop = threading.Event()

    def read_slowly():  # 256 bytes from each stream every half second
        while not stop.wait(0.5):
            for i, s in enumerate(streams):
                s.settimeout(0.01)
                try:
                    got = s.recv(256)
                    if len(heads[i]) < 4096:
                        heads[i] += got
                except OSError:
                    pass

    reader = threading.Thread(target=read_slowly, daemon=True)
    reader.start()
    try:
        # The streams' short prompts join the batch a few at a time: wait until all decode.
        deadline, unanswered, counts = time.time() + 30, 0, None
        while time.time() < deadline:
            counts = engine_counts(srv)
            unanswered = unanswered + 1 if counts is None else 0
            assert unanswered < 3, "GET /health got no answer while 64 streams ran"
            if counts and counts["decoding"] >= 64:
                break
            time.sleep(0.5)
        assert counts and counts["decoding"] >= 64, \
            f"the 64 streams were not all decoding after 30 s: {counts}"
        srv.normal_ok()
        srv.normal_ok()
        # The reader takes from each stream every half second: give it a few rounds to have
        # seen every stream's first event (they are all decoding, so each has one to send).
        deadline, streaming = time.time() + 10, 0
        while time.time() < deadline:
            streaming = sum(status_of(x) == 200 and b"data: " in x for x in heads)
            if streaming == 64:
                break
            time.sleep(0.25)
        assert streaming == 64, f"only {streaming} of 64 streams were answered and streaming " \
                                "(the check needs them running)"
    finally:
        stop.set()
        reader.join()
        for s in streams:
            s.close()
        srv.stop()  # 64 streams of 4096 tokens would slow every case after this one


# ---- cause 5: no Range on the page ----

def page_ranges(h):
    srv = start_with(h, max_header=16384)  # 2,000 ranges are 6 KB of header
    status, headers, page = srv.request("GET", "/")
    assert status == 200 and len(page) > 1000, f"GET / got {status}, {len(page)} bytes"
    ranges = "bytes=" + ",".join(["0-"] * 2000)
    with h.memory_bound(srv, 50):
        got, got_headers, body = srv.request("GET", "/", headers={"Range": ranges})
    assert got == 200, f"GET / with 2,000 ranges got {got} ({len(body)} bytes)"
    assert len(body) == len(page), f"GET / with 2,000 ranges sent {len(body)} bytes, " \
                                   f"the page is {len(page)}"
    assert "multipart" not in got_headers.get("content-type", ""), got_headers
    srv.normal_ok()


# ---- cause 10: framing ----

def framing_refused(h):
    srv = h.default
    both = srv.raw(post(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"))
    assert status_of(both) == 400, f"Content-Length with chunked got {status_of(both)}"
    two = srv.raw(post(b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(JS), len(JS)), JS))
    assert status_of(two) == 400, f"two Content-Lengths got {status_of(two)}"
    srv.normal_ok()


def refused_body_not_a_request(h):
    srv = keyed_server(h)
    inner = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n"
    out = srv.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(inner) + inner + get())
    answers = [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]
    assert b'"object":"list"' not in out, "the body of a 401 was served as GET /v1/models"
    assert answers == [401, 200], f"a POST without the key whose body is a request, then " \
                                  f"GET /health, got {answers} (wanted [401, 200])"


def pipelined(h):
    srv = h.default
    out = srv.raw(post(b"Content-Length: %d\r\n" % len(JS), JS) * 3 + get())
    answers = out.count(b"HTTP/1.1 200")
    assert answers == 4, f"3 pipelined completions and a GET got {answers} answers 200 " \
                         f"(wanted 4): {out[:300]!r}"
    srv.normal_ok()


# ---- cause 16: a busy port ----

def busy_port(h):
    srv = h.default
    second = subprocess.Popen([str(h.cli), "serve", "-m", str(h.model), "--host", "127.0.0.1",
                               "--port", str(srv.port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        _, err = second.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        second.kill()
        second.communicate()
        raise AssertionError(f"a second server on the busy port {srv.port} started and ran")
    assert second.returncode != 0, f"a second server on a busy port exited 0: {err[-300:]}"
    assert "Address already in use" in err, f"the refusal does not say why: {err[-300:]}"
    srv.normal_ok()


# ---- cause 17: Expect: 100-continue, HEAD, nosniff ----

def expect_continue(h):
    srv = h.default
    over = srv.raw(post(b"Expect: 100-continue\r\nContent-Length: 5000000\r\n"))
    assert status_of(over) == 413 and b" 100 " not in over.split(b"\r\n", 1)[0], \
        f"Expect: 100-continue with a 5 MB body over the limit got {header_block(over)!r}"
    # Within the limit: 100 first, then the answer once the body is sent.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(5)
    try:
        s.sendall(post(b"Expect: 100-continue\r\nContent-Length: %d\r\nConnection: close\r\n"
                       % len(JS)))
        first = s.recv(4096)
        assert first.startswith(b"HTTP/1.1 100 "), \
            f"Expect: 100-continue within the limit got {first[:100]!r}"
        s.sendall(JS)
        out = b""
        while (b := s.recv(65536)):
            out += b
    except socket.timeout:
        raise AssertionError("no answer to Expect: 100-continue within the limit") from None
    finally:
        s.close()
    assert status_of(out) == 200, f"the body after 100 Continue got {out[:200]!r}"
    srv.normal_ok()


def head_without_body(h):
    srv = keyed_server(h)
    for path in (b"/health", b"/"):
        out = srv.raw(get(path, method=b"HEAD"))
        assert status_of(out) == 200, \
            f"HEAD {path.decode()} with a key set got {status_of(out)} (GET is open)"
        assert out.split(b"\r\n\r\n", 1)[1] == b"", \
            f"HEAD {path.decode()} came with a body: {out[-100:]!r}"
    srv.normal_ok()


def nosniff(h):
    srv = h.default
    answers = [("GET /", srv.request("GET", "/")[1]),
               ("GET /health", srv.request("GET", "/health")[1]),
               ("a 404", srv.request("GET", "/nothing-here")[1]),
               ("a 400", srv.request("POST", "/v1/completions", {"prompt": 5})[1]),
               ("a 413", srv.request("POST", "/v1/completions", b"x" * 70000,
                                     {"Content-Type": "application/json"})[1])]
    for what, headers in answers:
        assert headers.get("x-content-type-options") == "nosniff", \
            f"{what} has no 'X-Content-Type-Options: nosniff': {headers}"
    srv.normal_ok()


CASES = [
    Case("1", "a 1 MiB chunked body over --max-body is 413", body_limit_chunked),
    Case("1", "a 200 MiB chunked body is 413, refused early, memory bounded",
         body_limit_chunked_200mib),
    Case("1", "a 73 KB gzip body (72 MiB inflated) is 415, memory bounded", body_gzip),
    Case("2", "a long header line and 1,000 header lines are 431", header_limits),
    Case("2", "16 MB of headers is 431, memory bounded", header_16mb),
    Case("3", "a slow header and a slow body are 408", slow_header_and_body),
    Case("3", "64 idle and 64 slow-header connections take no handler thread",
         idle_and_slow_connections),
    Case("3", "connections over --max-connections get 503 with Retry-After",
         too_many_connections),
    Case("3", "a normal request is answered while 64 long streams are read slowly", long_streams),
    Case("5", "2,000 ranges on the page: the whole page, 200", page_ranges),
    Case("10", "Content-Length with chunked, two Content-Lengths: 400", framing_refused),
    Case("10", "the body of a 401 is not read as the next request", refused_body_not_a_request),
    Case("10", "pipelined requests are answered in order", pipelined),
    Case("16", "a second server on a busy port is refused", busy_port),
    Case("17", "Expect: 100-continue: 413 before any 100 over the limit, 100 within",
         expect_continue),
    Case("17", "HEAD is answered like GET, without a body", head_without_body),
    Case("17", "answers carry X-Content-Type-Options: nosniff", nosniff),
]
