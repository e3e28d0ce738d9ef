"""Cases of the scheduler (cause 4): a long prompt does not hold back a short request, and a
request whose client has left stops being decoded."""
import json
import socket
import threading
import time

from harness import Case
from http_cases import engine_counts, post, start_with


def wait_for(srv, what, test, within_s):
    """Polls /health's request counts until test(counts) holds; fails after `within_s`."""
    deadline, counts = time.time() + within_s, None
    while time.time() < deadline:
        counts = engine_counts(srv)
        if counts is not None and test(counts):
            return counts
        time.sleep(0.1)
    raise AssertionError(f"{what} within {within_s} s: /health's counts {counts}")


def long_prompt_shares(h):
    srv = start_with(h, max_body=1 << 20)
    prompt = "ROMEO: But soft, what light through yonder window breaks? " * 3500  # 200 KB
    threading.Thread(target=lambda: srv.request(
        "POST", "/v1/completions", dict(prompt=prompt, max_tokens=1), timeout=600),
        daemon=True).start()
    try:
        wait_for(srv, "the long prompt was not being read", lambda c: c["prefilling"] >= 1, 10)
        srv.normal_ok()
        counts = engine_counts(srv)
        assert counts is not None and counts["prefilling"] >= 1, \
            f"the long prompt was no longer being read after the probe ({counts}): the probe " \
            "did not test sharing"
    finally:
        srv.stop()  # the rest of the long prompt would take minutes of the machine


def left_client_not_decoded(h):
    srv = start_with(h, max_tokens=100000)
    body = json.dumps(dict(prompt="ROMEO:", max_tokens=100000)).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    try:
        s.sendall(post(b"Content-Length: %d\r\n" % len(body), body))
        before = wait_for(srv, "the request did not decode", lambda c: c["decoding"] >= 1, 10)
        time.sleep(0.5)
        s.close()
        gone = wait_for(srv, "the request of a client that left was not cancelled",
                        lambda c: c["cancelled"] > before["cancelled"] and c["decoding"] == 0,
                        5)
        time.sleep(0.5)
        after = engine_counts(srv)
        assert after["tokens"] == gone["tokens"], \
            f"tokens went on growing after the cancel: {gone['tokens']} -> {after['tokens']}"
        srv.normal_ok()
    finally:
        s.close()
        srv.stop()  # 100,000 tokens would take minutes of the machine


CASES = [
    Case("4", "a 6-token request is answered within 2 s while a 200 KB prompt is read",
         long_prompt_shares),
    Case("4", "a non-streamed request whose client left stops being decoded",
         left_client_not_decoded),
]
