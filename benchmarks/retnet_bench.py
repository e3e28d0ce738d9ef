"""Runs `retnet bench --json` and returns its JSON object; shared by compare_pytorch.py and
scaling.py. (The CLI reports its own VmHWM, so no shell is needed between this large Python
process and the measured one.)"""
import json
import subprocess


def run_retnet(cli, config, threads, repeat, **flags):
    args = [cli, "bench", "--config", config, "--threads", str(threads), "--repetitions", str(repeat), "--json"]
    for k, v in flags.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["command"] = " ".join(args[1:])
    return result
