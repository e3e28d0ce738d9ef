"""Cases of the HTTP layer (causes 1, 2, 3, 5, 10, 16 and the HTTP parts of 17)."""
from harness import Case, status_of


def body_limit_chunked(h):
    srv = h.default
    chunk = b"%x\r\n%s\r\n" % (16384, b"x" * 16384)
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    with h.memory_bound(srv, 50):
        got = status_of(srv.raw(head, [chunk] * 64 + [b"0\r\n\r\n"]))
    assert got == 413, f"a 1 MiB chunked body got {got}"
    srv.normal_ok()


CASES = [Case("1", "a chunked body over --max-body is 413", body_limit_chunked)]
