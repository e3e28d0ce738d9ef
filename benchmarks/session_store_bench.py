#!/usr/bin/env python3
"""What a session costs in Redis (docs/SERVER.md, "Scaling out"): its bytes for the demo model,
the base config and the 1.3B shape, and the time to store it in and fetch it from a local
redis-server started with deploy/redis.conf (append-only file on, as deployed).

  benchmarks/session_store_bench.py RETNET_CLI MODEL_DIR [--rounds N]

State bytes: the demo model's and the base config's are read from `GET /v1/models` (meta
state_bytes) of a `retnet serve` started on them (the base config with --random-weights); the
1.3B shape's (fla-hub/retnet-1.3B-100B: 24 layers, 8 heads, dk 256, dv 512) is computed with the
formula those two confirm: 8 bytes of position + layers x heads x dk x (dv + 1) floats. Store
and fetch: redis-benchmark's SET and GET of a value of that many bytes, one client on loopback,
the median of --rounds (a third of them for the 1.3B shape). Through the server, for the demo
model and the base config: a 1-token turn of a session kept in memory, in Redis on the replica
that served the previous turn (+ a store), and alternating between two replicas (+ a store and
a fetch).
"""
import argparse
import csv
import io
import json
import re
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """`retnet serve ARGS` on a free loopback port, 1 compute thread."""

    def __init__(self, args):
        self.proc = subprocess.Popen(args + ["--host", "127.0.0.1", "--port", "0", "--threads",
                                             "1"],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.port = None
        for line in self.proc.stderr:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            sys.exit("retnet serve did not start: " + " ".join(args))
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def call(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def state_bytes_of(args):
    """The model's name and meta.state_bytes, from GET /v1/models."""
    srv = Serve(args)
    try:
        model = srv.call("/v1/models")["data"][0]
        return model["id"], model["meta"]["state_bytes"]
    finally:
        srv.stop()


def turn_ms(srv, sid):
    """One 1-token turn of session `sid`: its wall time in ms."""
    t0 = time.perf_counter()
    srv.call("/v1/completions", {"session": sid, "prompt": "\n", "max_tokens": 1,
                                 "temperature": 0})
    return (time.perf_counter() - t0) * 1e3


def through_server(model_args, redis_url, rounds):
    """Median ms of a 1-token session turn: on a server with its sessions in memory, on a
    replica that served the previous turn too (its commit stores the state in Redis), and
    alternating between two replicas (each turn also fetches the state)."""
    local = Serve(model_args)
    a = Serve(model_args + ["--sessions", redis_url])
    b = Serve(model_args + ["--sessions", redis_url])
    try:
        for srv, sid in ((local, "bench-local"), (a, "bench-a"), (a, "bench-ab")):
            srv.call("/v1/sessions", {"id": sid})
            srv.call("/v1/completions", {"session": sid, "prompt": "ROMEO:", "max_tokens": 1,
                                         "temperature": 0})
        t_local = statistics.median(turn_ms(local, "bench-local") for _ in range(rounds))
        t_same = statistics.median(turn_ms(a, "bench-a") for _ in range(rounds))
        t_moved = statistics.median(turn_ms((a, b)[i % 2], "bench-ab") for i in range(rounds))
        return t_local, t_same, t_moved
    finally:
        for srv in (local, a, b):
            srv.stop()


def set_get_p50_ms(port, size, rounds):
    """redis-benchmark's median SET and GET latency of a `size`-byte value, one client."""
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-d", str(size),
                          "-n", str(rounds), "-c", "1", "--csv"],
                         capture_output=True, text=True, check=True).stdout
    p50 = {}
    for row in csv.DictReader(io.StringIO(out)):
        p50[row["test"]] = float(row["p50_latency_ms"])
    return p50["SET"], p50["GET"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    model_args = [[args.cli, "serve", "-m", args.model],
                  [args.cli, "serve", "--random-weights",
                   str(ROOT / "benchmarks/configs/base.json")]]
    shapes = [state_bytes_of(m) for m in model_args]
    model_args_of = {shapes[i][0]: model_args[i] for i in range(2)}
    layers, heads, dk, dv = 24, 8, 256, 512
    shapes.append(("1.3B shape (computed)", 8 + layers * heads * dk * (dv + 1) * 4))

    work = Path(tempfile.mkdtemp(prefix="retnet-store-bench-"))
    port = free_port()
    redis = subprocess.Popen(["redis-server", str(ROOT / "deploy/redis.conf"), "--port",
                              str(port), "--dir", str(work)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "ping"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                 text=True).stdout.split()[2]
        print(f"Redis {version} on loopback, appendonly yes / appendfsync everysec; "
              f"median of {args.rounds}")
        print(f"{'model':<24}{'bytes per session':>25}{'store (SET)':>13}{'fetch (GET)':>13}")
        for name, size in shapes:
            rounds = args.rounds if size < 50e6 else max(1, args.rounds // 3)
            store, fetch = set_get_p50_ms(port, size, rounds)
            print(f"{name:<24}{size:>12,} B ({size / 1e6:.2f} MB)"
                  f"{store:>10.1f} ms{fetch:>10.1f} ms")
        print("Through `retnet serve` (median ms of a 1-token turn in a session):")
        print(f"{'model':<24}{'memory':>10}{'Redis, same replica':>22}{'alternating replicas':>22}")
        for name, model_args in model_args_of.items():
            t_local, t_same, t_moved = through_server(model_args, f"redis://127.0.0.1:{port}",
                                                      args.rounds)
            print(f"{name:<24}{t_local:>10.1f}{t_same:>13.1f} (+{t_same - t_local:.1f})"
                  f"{t_moved:>13.1f} (+{t_moved - t_local:.1f})")
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
