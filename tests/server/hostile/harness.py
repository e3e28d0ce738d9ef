"""What every hostile-client case uses: servers started with chosen flags, requests over
http.client or raw sockets, the server's memory, and the probe that a normal request is still
answered in time.

A case is Case(number, title, fn): `number` is the cause's number in docs/SERVER.md's list of
hostile-client cases, `fn(h)` gets the Harness and raises AssertionError when the server does
not hold.
"""
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Small limits and short deadlines, so that each attack is cheap to mount.
DEFAULT_FLAGS = ["--max-body", "65536", "--max-header", "4096", "--header-timeout", "2",
                 "--body-timeout", "3", "--max-connections", "40"]


@dataclass
class Case:
    number: str
    title: str
    fn: Callable


def status_of(raw):
    """The status code of the first answer in raw bytes; 0 when there is none."""
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else 0


def recv_all(sock):
    """Everything `sock` receives until the peer closes it, or an error or its timeout."""
    out = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    return out


class Srv:
    """One running `retnet serve`."""

    def __init__(self, cli, model, flags, env=None, api_key=None, sessions_dir=None,
                 preexec_fn=None):
        args = [str(cli), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", "0"]
        args += list(flags)
        if api_key is not None:
            args += ["--api-key", api_key]
        if sessions_dir is not None:
            args += ["--sessions-dir", str(sessions_dir)]
        self.api_key = api_key
        self.args = args
        self._log = []
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=env, preexec_fn=preexec_fn)
        self.port = None
        deadline = time.time() + 60
        for line in self.proc.stderr:
            self._log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
            if time.time() > deadline:
                break
        if self.port is None:
            self.proc.kill()
            raise AssertionError("the server did not start: " + "".join(self._log)[-2000:])
        # Keep reading its log so that the pipe never fills.
        import threading
        threading.Thread(target=self._drain, daemon=True).start()
        self.pid = self.proc.pid

    def _drain(self):
        for line in self.proc.stderr:
            self._log.append(line)

    def log(self):
        return "".join(self._log)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _status_kb(self, field):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def peak_rss_mb(self):
        return self._status_kb("VmHWM") / 1024

    def rss_mb(self):
        return self._status_kb("VmRSS") / 1024

    def request(self, method, path, body=None, headers=None, timeout=10):
        """(status, headers as a dict with lower-case names, body bytes)."""
        h = {}
        if self.api_key is not None:
            h["Authorization"] = "Bearer " + self.api_key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def completion(self, prompt="ROMEO:", max_tokens=4, timeout=30, **fields):
        """(status, the answer's JSON)."""
        status, _, body = self.request("POST", "/v1/completions",
                                       dict(prompt=prompt, max_tokens=max_tokens, **fields),
                                       timeout=timeout)
        try:
            return status, json.loads(body)
        except ValueError:
            return status, {"raw": body[:200].decode(errors="replace")}

    def raw(self, data, pieces=(), wait=3.0):
        """Sends data, then each of pieces; all bytes received until close or `wait` s."""
        s = socket.create_connection(("127.0.0.1", self.port))
        s.settimeout(wait)
        try:
            s.sendall(data)
            for p in pieces:
                s.sendall(p)
        except OSError:
            pass
        out = recv_all(s)
        s.close()
        return out

    def normal_ok(self, within_s=2.0):
        """A 4-token completion is answered 200 within `within_s` seconds, the server alive."""
        assert self.alive(), "the server is gone: " + self.log()[-1000:]
        t0 = time.time()
        try:
            status, body = self.completion(max_tokens=4, timeout=within_s + 5)
        except (socket.timeout, TimeoutError, ConnectionError) as e:
            raise AssertionError(f"a normal request got no answer within {within_s + 5:.0f} s "
                                 f"({e.__class__.__name__})") from None
        took = time.time() - t0
        assert status == 200, f"a normal request got {status}: {body}"
        assert took <= within_s, f"a normal request took {took:.2f} s (> {within_s} s)"


class Harness:
    def __init__(self, cli, model):
        self.cli, self.model = Path(cli), Path(model)
        self._servers = []
        self._default = None
        self._root = Path(tempfile.mkdtemp(prefix="retnet-hostile-"))
        self._count = 0
        self.tmp = None

    def start(self, flags=(), env=None, api_key=None, sessions_dir=None, preexec_fn=None,
              defaults=True):
        srv = Srv(self.cli, self.model, (DEFAULT_FLAGS if defaults else []) + list(flags),
                  env=env, api_key=api_key, sessions_dir=sessions_dir, preexec_fn=preexec_fn)
        self._servers.append(srv)
        return srv

    @property
    def default(self):
        if self._default is None or not self._default.alive():
            self._default = self.start()
        return self._default

    def new_case(self):
        self._count += 1
        self.tmp = self._root / f"case{self._count}"
        self.tmp.mkdir()

    @contextlib.contextmanager
    def memory_bound(self, srv, mb=50):
        """Asserts that the server's peak RSS grew by at most `mb` MB inside the block."""
        before = srv.peak_rss_mb()
        yield
        after = srv.peak_rss_mb()
        print(f"     peak RSS {before:.0f} -> {after:.0f} MB")
        assert after - before <= mb, f"peak RSS grew by {after - before:.0f} MB (> {mb} MB)"

    def close(self):
        for s in self._servers:
            s.stop()
        shutil.rmtree(self._root, ignore_errors=True)
