#!/usr/bin/env python3
"""`retnet serve` against hostile clients (ctest "ServerHostileClients"): one case per cause in
docs/SERVER.md's list, each checking the answer's status, that the server stays up and answers
a normal request within 2 s while the attack runs, and memory within a stated bound.

Usage: run.py RETNET_CLI MODEL_DIR [-k NUMBER ...]   (-k: only these cases)
"""
import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Harness  # noqa: E402



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("model")
    ap.add_argument("-k", action="append", default=[], help="run only this case number")
    args = ap.parse_args()
    cases = []
    for path in sorted(Path(__file__).resolve().parent.glob("*_cases.py")):
        cases += importlib.import_module(path.stem).CASES
    cases.sort(key=lambda c: (int("".join(ch for ch in c.number if ch.isdigit()) or 0), c.number))
    if args.k:
        cases = [c for c in cases if c.number in args.k]
        if not cases:
            sys.exit("no case numbered " + ", ".join(args.k))
    h = Harness(args.cli, args.model)
    failed = []
    t_all = time.time()
    try:
        for c in cases:
            h.new_case()
            t0 = time.time()
            try:
                c.fn(h)
                print(f"ok   {c.number:>4} {c.title} ({time.time() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported, then the next case
                failed.append(c.number)
                print(f"FAIL {c.number:>4} {c.title}: {e}", flush=True)
                if not isinstance(e, AssertionError):
                    traceback.print_exc()
    finally:
        h.close()
    print(f"{len(cases) - len(failed)} of {len(cases)} cases held in {time.time() - t_all:.0f} s")
    if failed:
        print("FAILED cases: " + " ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
