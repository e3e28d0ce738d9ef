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
the median of --rounds (a third of them for the 1.3B shape).
"""
import argparse
import csv
import io
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def state_bytes_of(args):
    """meta.state_bytes of `retnet serve ARGS` on a free port."""
    proc = subprocess.Popen(args + ["--host", "127.0.0.1", "--port", "0", "--threads", "1"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = None
        for line in proc.stderr:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("retnet serve did not start: " + " ".join(args))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
            model = json.load(r)["data"][0]
        return model["id"], model["meta"]["state_bytes"]
    finally:
        proc.terminate()
        proc.wait()


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
    shapes = [state_bytes_of([args.cli, "serve", "-m", args.model]),
              state_bytes_of([args.cli, "serve", "--random-weights",
                              str(ROOT / "benchmarks/configs/base.json")])]
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
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
