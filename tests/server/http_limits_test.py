#!/usr/bin/env python3
"""The HTTP layer of `retnet serve` against hostile framing (ctest "ServerHttpLimits").

Starts `retnet serve` on a free port with small limits and short deadlines, then sends raw
requests over sockets and checks the status of each answer: bodies over --max-body (chunked
too) 413, headers over --max-header 431, Content-Length with chunked and two Content-Lengths
400, Content-Encoding 415, Expect: 100-continue refused with 413 before any 100, slow header
and slow body 408, connections beyond --max-connections 503 with Retry-After, pipelined
requests answered in order, a refused request's body not read as the next request, HEAD
without a body, a busy port refused at start-up. After each case the server must still answer.

Usage: http_limits_test.py RETNET_CLI MODEL_DIR
"""
import re
import socket
import subprocess
import sys
import time

cli, model = sys.argv[1], sys.argv[2]
FLAGS = ["--max-body", "65536", "--max-header", "4096", "--header-timeout", "1",
         "--body-timeout", "2", "--max-connections", "40", "--api-key", "k"]
server = subprocess.Popen([cli, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0"] +
                          FLAGS, stderr=subprocess.PIPE, text=True)
port = None
for line in server.stderr:
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1))
        break
if port is None:
    sys.exit("FAILED: the server did not start")
failures = []


def exchange(data, pieces=(), wait=3.0):
    """Sends data (then each of pieces), returns all bytes received until close or `wait`."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(wait)
    out = b""
    try:
        s.sendall(data)
        for p in pieces:
            s.sendall(p)
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    s.close()
    return out


def status(out):
    return out.split(b"\r\n", 1)[0].decode(errors="replace")


def check(name, got, wanted, probe=True):
    ok = wanted in got
    print(("ok   " if ok else "FAIL ") + f"{name}: {got!r}" + ("" if ok else f", wanted {wanted!r}"))
    if not ok:
        failures.append(name)
    if not probe:
        return
    alive = status(exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    if "200" not in alive:
        failures.append(f"{name}: server not answering afterwards ({alive})")


JS = b'{"prompt":"ROMEO:","max_tokens":2}'
AUTH = b"Authorization: Bearer k\r\n"


def post(extra, body=b""):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
            AUTH + extra + b"\r\n" + body)


def chunk(d):
    return b"%x\r\n%s\r\n" % (len(d), d)


big = [chunk(b"x" * 16384) for _ in range(64)] + [b"0\r\n\r\n"]  # 1 MiB chunked
check("1 chunked body over --max-body", status(exchange(post(b"Transfer-Encoding: chunked\r\n"),
                                                         big)), "413")
check("2 header over --max-header", status(exchange(
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 5000 + b"\r\n\r\n")), "431")
check("2 many headers", status(exchange(
    b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: a\r\n" * 1000 + b"\r\n")), "431")
check("2 2 MB of headers", status(exchange(
    b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: a\r\n" * 250000 + b"\r\n")), "431")
check("10 Content-Length with chunked", status(exchange(post(
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"))), "400")
check("10 two Content-Lengths", status(exchange(post(
    b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(JS), len(JS)), JS))), "400")
check("1 gzip body", status(exchange(post(b"Content-Encoding: gzip\r\nContent-Length: 4\r\n",
                                          b"abcd"))), "415")
check("17 Expect: 100-continue over the limit", status(exchange(post(
    b"Expect: 100-continue\r\nContent-Length: 5000000\r\n"))), "413")
check("17 Expect: 100-continue within the limit", status(exchange(post(
    b"Expect: 100-continue\r\nContent-Length: %d\r\n" % len(JS)), wait=1)), "100 Continue")
inner = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n"
refused = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(inner)
           + inner + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
out = exchange(refused)
check("10 a 401's body is not the next request",
      f"{out.count(b'HTTP/1.1 401')} x 401, {out.count(b'HTTP/1.1 200')} x 200", "1 x 401, 1 x 200")
pipelined = (post(b"Content-Length: %d\r\n" % len(JS), JS) * 3 +
             b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check("10 pipelined requests", f"{exchange(pipelined).count(b'HTTP/1.1 200')} x 200", "4 x 200")
head = exchange(b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check("17 HEAD /health with a key set", status(head), "200")
check("17 HEAD has no body", repr(head.split(b"\r\n\r\n", 1)[1]), "b''")
check("5 Range ignored", status(exchange(
    b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1,2-3\r\nConnection: close\r\n\r\n")), "200 OK")
start = time.time()
check("3 slow header", status(exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n", wait=5)), "408")
check("3 slow body", status(exchange(post(b"Content-Length: 100\r\n", b"{"), wait=6)), "408")

held = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
for s in held:
    s.sendall(b"GET /health HTTP/1.1\r\n")
time.sleep(0.3)
held[-1].settimeout(2)
last = held[-1].recv(1000)
check("3 connections over --max-connections", status(last), "503", probe=False)
check("3 503 says when to retry", last.decode(errors="replace"), "Retry-After: ", probe=False)
for s in held:
    s.close()
time.sleep(0.5)
check("3 served again once they are gone", status(exchange(
    b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")), "200")

busy = subprocess.run([cli, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(port)],
                      capture_output=True, text=True, timeout=60)
check("16 a busy port is refused", f"exit {busy.returncode}: {busy.stderr.strip()}",
      "Address already in use")

server.terminate()
server.wait(timeout=30)
if failures:
    print("FAILED:", "; ".join(failures))
    sys.exit(1)
print("passed: HTTP limits")
