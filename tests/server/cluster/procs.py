"""The processes of the cluster test: redis-server (deploy/redis.conf), replicas of `retnet
serve` (the port each prints), HAProxy (deploy/haproxy.cfg filled in), and a small HTTP client
that reads answers whole or as server-sent events.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not within {seconds} s")


class Answer:
    """A completion's outcome: status, the text, the session's tokens, who served it, and for a
    failed one what went wrong (an error body, an error event, or a stream cut short)."""

    def __init__(self, status, text="", tokens=None, served_by=None, error=None, code=None):
        self.status, self.text, self.tokens = status, text, tokens
        self.served_by, self.error, self.code = served_by, error, code

    @property
    def ok(self):
        return self.status == 200 and self.error is None

    def __repr__(self):
        return (f"Answer({self.status}, {self.text!r}, tokens={self.tokens}, "
                f"by={self.served_by}, error={self.error!r})")


class Endpoint:
    """Requests to one HTTP address (a replica or the proxy)."""

    def __init__(self, port):
        self.port = port

    def request(self, method, path, body=None, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {}
            if body is not None:
                body = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data)
            except ValueError:
                return r.status, {"raw": data[:300].decode(errors="replace")}
        finally:
            c.close()

    def create_session(self, sid):
        return self.request("POST", "/v1/sessions", {"id": sid})

    def session_tokens(self, sid):
        status, body = self.request("GET", f"/v1/sessions/{sid}")
        assert status == 200, f"GET /v1/sessions/{sid}: {status} {body}"
        return body["tokens"]

    def complete(self, body, on_open=None, timeout=60):
        """POST /v1/completions; a stream is read event by event, on_open(served_by) called
        after its first event."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            by = r.getheader("X-Served-By")
            if not body.get("stream") or r.status != 200:
                data = r.read()
                if on_open:
                    on_open(by)
                try:
                    j = json.loads(data)
                except ValueError:
                    return Answer(r.status, served_by=by, error=data[:200].decode(errors="replace"))
                if r.status != 200:
                    return Answer(r.status, served_by=by, error=j.get("error", {}).get("message"),
                                  code=j.get("error", {}).get("code"))
                return Answer(200, j["choices"][0]["text"], j.get("session", {}).get("tokens"), by)
            return self._read_stream(r, by, on_open)
        except (OSError, http.client.HTTPException) as e:
            return Answer(0, error=f"{e.__class__.__name__}: {e}")
        finally:
            c.close()

    @staticmethod
    def _read_stream(r, by, on_open):
        text, tokens, opened = "", None, False
        try:
            while True:
                line = r.readline()
                if not line:
                    return Answer(200, text, tokens, by, error="the stream ended without [DONE]")
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                if not opened and on_open:
                    on_open(by)
                opened = True
                data = line[6:]
                if data == b"[DONE]":
                    return Answer(200, text, tokens, by)
                event = json.loads(data)
                if "error" in event:
                    return Answer(200, text, tokens, by, error=event["error"].get("message"),
                                  code=event["error"].get("code"))
                for choice in event.get("choices", []):
                    text += choice.get("text", "")
                if "session" in event:
                    tokens = event["session"]["tokens"]
                if "usage" in event and event["usage"] and "session" in event["usage"]:
                    tokens = event["usage"]["session"]["tokens"]
        except (OSError, http.client.HTTPException, ValueError) as e:
            return Answer(200, text, tokens, by, error=f"{e.__class__.__name__}: {e}")


class Process:
    def __init__(self, args, log_path, env=None):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=ROOT)

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        return Path(self.log_path).read_text(errors="replace")[-3000:]

    def kill9(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()


class Redis(Process):
    def __init__(self, data_dir, port, log_path):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.data_dir = port, data_dir
        super().__init__(["redis-server", str(ROOT / "deploy/redis.conf"), "--port", str(port),
                          "--dir", str(data_dir)], log_path)
        wait_until("redis-server answering PING", self.answers, 20)

    def answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def url(self, db=0):
        return f"redis://127.0.0.1:{self.port}" + (f"/{db}" if db else "")


class Replica(Process, Endpoint):
    """`retnet serve` on a free loopback port (read from its startup line)."""

    def __init__(self, cli, model, flags, log_path):
        Process.__init__(self, [str(cli), "serve", "-m", str(model), "--host", "127.0.0.1",
                                "--port", "0", "--threads", "1"] + list(flags), log_path)
        port = None
        deadline = time.time() + 60
        while port is None and time.time() < deadline and self.alive():
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        if port is None:
            self.kill9()
            raise AssertionError("a replica did not start: " + " ".join(self.args) + "\n" +
                                 self.log())
        Endpoint.__init__(self, port)


class HAProxy(Process, Endpoint):
    """HAProxy with deploy/haproxy.cfg, its placeholders filled as scripts/cluster.sh does."""

    def __init__(self, replicas, work_dir):
        port = free_port()
        servers = "\n".join(f"    server replica{i} 127.0.0.1:{r.port}"
                            for i, r in enumerate(replicas))
        cfg = (ROOT / "deploy/haproxy.cfg").read_text()
        cfg = cfg.replace("@PORT@", str(port)).replace("@SERVERS@", servers)
        path = work_dir / "haproxy.cfg"
        path.write_text(cfg)
        self.names = {f"replica{i}": r for i, r in enumerate(replicas)}
        Process.__init__(self, ["haproxy", "-f", str(path)], work_dir / "haproxy.log")
        Endpoint.__init__(self, port)
        wait_until("HAProxy answering /health", self._health_ok, 20)

    def _health_ok(self):
        try:
            return self.request("GET", "/health", timeout=2)[0] == 200
        except OSError:
            return False

    def wait_all_healthy(self, n, seconds=20):
        """Until n consecutive /health through the proxy are answered 200: with round robin,
        a replica that is down has left the rotation."""
        def n_ok():
            return all(self._health_ok() for _ in range(n))
        wait_until(f"{n} consecutive /health through HAProxy answered 200", n_ok, seconds)


def parallel(fns):
    """Runs each function in its own thread; their results in order."""
    out = [None] * len(fns)

    def run(i):
        out[i] = fns[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def env_has(program):
    return any(os.access(os.path.join(d, program), os.X_OK)
               for d in os.environ.get("PATH", "").split(os.pathsep))
