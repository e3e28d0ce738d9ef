#!/usr/bin/env python3
"""fla-hub/retnet-1.3B-100B's shape at real size, retnet beside PyTorch, in one run:

    /usr/bin/python3 scripts/fixtures/make_synthetic_checkpoint.py /tmp/retnet-1.3B-synthetic
    cmake -S . -B build-rel -DRETNET_BUILD_TESTS=OFF && cmake --build build-rel --target retnet_cli
    /usr/bin/python3 benchmarks/real_size.py /tmp/retnet-1.3B-synthetic build-rel/tools/retnet

Measures, each in a fresh process at --threads threads (default 2), retnet and PyTorch alternating
for --rounds rounds (each side's median round is kept):
  * the machine: read bandwidth (torch.sum over 1 GiB float32) and float32 GEMM peak (torch.mm,
    the model's prompt shapes);
  * retnet: `retnet bench -m DIR --prompt-len 1 --gen-len 1 --json` (peak RSS, load time), then
    prompt and decode speed;
  * PyTorch (Debian's python3-torch): FlaDecoder of scripts/reference/retnet_torch.py, fla's op
    structure (rotation by halves, plain retention, RMSNorm-gated heads, fused SwiGLU), weights
    read from the same folder as float32; prompt in the parallel form, decoding by the recurrent
    step. Its logits are first checked against `retnet score --logits-out` on 8 tokens.
Bandwidth bound: decode tokens/s <= bandwidth / (float32 weight bytes a step reads: all but the
embedding table). GEMM bound: prompt tokens/s <= GEMM peak / (2 x those weights' parameters +
retention's multiply-adds per token). Results: JSON on stdout (and --out FILE).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ---------------------------------------------------------------- PyTorch side (worker process)


def worker_torch(p):
    import torch
    from reference.retnet_torch import FlaDecoder, load_fla
    torch.set_num_threads(p["threads"])
    t0 = time.perf_counter()
    cfg, w = load_fla(p["model"])
    load_s = time.perf_counter() - t0
    model = FlaDecoder(cfg, w)
    res = dict(load_seconds=load_s, peak_rss_after_load_bytes=peak_rss(), threads=p["threads"],
               version=torch.__version__)
    with torch.inference_mode():
        check = torch.tensor(p["check_tokens"])
        logits, states = model.prefill(check[:4])
        rows = [logits[0]]
        for j in range(4, len(check)):
            rows.append(model.step(int(check[j]), j, states)[0])
        res["check_logits_recurrent_after_parallel"] = torch.stack(rows).tolist()
        prompt = torch.randint(0, cfg["vocab_size"], (p["prompt_len"],),
                               generator=torch.Generator().manual_seed(7))
        times = []
        for r in range(p["repeat"] + 1):
            t0 = time.perf_counter()
            logits, states = model.prefill(prompt)
            times.append(time.perf_counter() - t0)
        res["prefill_seconds_all"] = times[1:]
        nxt, times = int(logits[0].argmax()), []
        for r in range(p["repeat"] + 1):
            st = [s.clone() for s in states]
            t0 = time.perf_counter()
            tok = nxt
            for s in range(p["gen_len"]):
                tok = int(model.step(tok, p["prompt_len"] + s, st)[0].argmax())
            times.append(time.perf_counter() - t0)
        res["decode_seconds_all"] = times[1:]
    res["peak_rss_bytes"] = peak_rss()
    return res


def worker_machine(p):
    import torch
    torch.set_num_threads(p["threads"])
    n = (1 << 30) // 4
    a = torch.ones(n, dtype=torch.float32)
    a.sum()
    best = min(timed(lambda: a.sum()) for _ in range(5))
    bandwidth = a.numel() * 4 / best / 1e9
    del a
    gemm = []
    for (M, K, N) in p["gemm_shapes"]:
        x, wt = torch.randn(M, K), torch.randn(N, K)
        torch.nn.functional.linear(x, wt)
        best = min(timed(lambda: torch.nn.functional.linear(x, wt)) for _ in range(5))
        gemm.append(dict(m=M, k=K, n=N, gflops=2 * M * K * N / best / 1e9))
    return dict(read_bandwidth_gb_per_s=bandwidth, gemm=gemm,
                gemm_peak_gflops=max(g["gflops"] for g in gemm), torch_version=torch.__version__)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_worker(task, params):
    env = dict(os.environ, OMP_NUM_THREADS=str(params["threads"]),
               OPENBLAS_NUM_THREADS=str(params["threads"]))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", task],
                          input=json.dumps(params), env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"worker {task} failed with status {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- retnet side


def retnet_bench(cli, model, threads, prompt_len, gen_len, repeat, chunk):
    out = subprocess.run([cli, "bench", "-m", model, "--prompt-len", str(prompt_len), "--gen-len",
                          str(gen_len), "--repetitions", str(repeat), "--threads", str(threads),
                          "--chunk-size", str(chunk), "--json"], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("cli", nargs="?")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--gen-len", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk-size", type=int, default=0,
                    help="retnet's prompt chunk (default: the whole prompt, like PyTorch's parallel form)")
    ap.add_argument("--out")
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        p = json.loads(sys.stdin.read())
        print(json.dumps({"torch": worker_torch, "machine": worker_machine}[a.worker](p)))
        return
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    d, h, layers, vocab = cfg["hidden_size"], cfg["num_heads"], cfg["num_hidden_layers"], cfg["vocab_size"]
    kd, vd = int(d * cfg["expand_k"]), int(d * cfg["expand_v"])
    inter = 256 * ((int(d * cfg["hidden_ratio"] * 2 / 3) + 255) // 256)
    P = a.prompt_len
    res = dict(model=a.model, threads=a.threads, prompt_len=P, gen_len=a.gen_len, repeat=a.repeat,
               retnet_chunk=a.chunk_size or P,
               cpu=subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout.split(
                   "Model name:")[1].splitlines()[0].strip(),
               load_average_start=os.getloadavg())
    limits = dict(threads=a.threads, gemm_shapes=[
        (P, d, kd), (P, d, 2 * inter), (P, inter, d), (P, vd, d), (P, d, vocab)])
    log("machine: read bandwidth and GEMM peak...")
    machine = [run_worker("machine", limits)]
    log(f"  {machine[-1]}")

    log("retnet: load, peak memory (prompt 1, gen 1)...")
    chunk = a.chunk_size or P
    mem = retnet_bench(a.cli, a.model, a.threads, 1, 1, 1, 1)
    check = [3, 141, 59, 26, 535, 89, 79, 323]
    subprocess.run([a.cli, "score", "-m", a.model, "--tokens", ",".join(map(str, check)), "--mode",
                    "recurrent", "--logits-out", "/tmp/real_size_logits.npy"], check=True,
                   stdout=subprocess.DEVNULL)
    ours = np.load("/tmp/real_size_logits.npy").astype(np.float64)[3:]  # PyTorch's rows: position
    # 3 (the end of a parallel prompt of 4 tokens), then recurrent steps 4..7

    # The two sides alternate, round after round, so that both see the same machine (others'
    # work on shared cores changes its speed from minute to minute); each keeps its median round.
    rounds_rn, rounds_pt = [], []
    for r in range(a.rounds):
        log(f"round {r + 1}/{a.rounds}: retnet...")
        rounds_rn.append(retnet_bench(a.cli, a.model, a.threads, P, a.gen_len, a.repeat, chunk))
        log(f"  prompt {rounds_rn[-1]['prefill_tokens_per_s']:.2f} tok/s, decode "
            f"{rounds_rn[-1]['decode_tokens_per_s']:.3f} tok/s, load {rounds_rn[-1]['load_seconds']:.1f} s")
        log(f"round {r + 1}/{a.rounds}: PyTorch...")
        pt = run_worker("torch", dict(model=a.model, threads=a.threads, prompt_len=P, gen_len=a.gen_len,
                                      repeat=a.repeat, check_tokens=check))
        theirs = np.array(pt.pop("check_logits_recurrent_after_parallel"))
        pt["check_relative_difference_vs_retnet"] = float(np.abs(ours - theirs).max() / np.abs(ours).max())
        pt["prefill_tokens_per_s"] = P / float(np.median(pt["prefill_seconds_all"]))
        pt["decode_tokens_per_s"] = a.gen_len / float(np.median(pt["decode_seconds_all"]))
        rounds_pt.append(pt)
        log(f"  prompt {pt['prefill_tokens_per_s']:.2f} tok/s, decode {pt['decode_tokens_per_s']:.3f} tok/s, "
            f"load {pt['load_seconds']:.1f} s, logits vs retnet {pt['check_relative_difference_vs_retnet']:.1e}")
    machine.append(run_worker("machine", limits))
    log(f"  {machine[-1]}")
    res["machine"] = dict(runs=machine,
                          read_bandwidth_gb_per_s=max(x["read_bandwidth_gb_per_s"] for x in machine),
                          gemm_peak_gflops=max(x["gemm_peak_gflops"] for x in machine))

    def med(rows, key):
        return float(np.median([row[key] for row in rows]))

    res["retnet"] = dict(load_seconds=mem["load_seconds"], peak_rss_bytes=mem["peak_rss_bytes"],
                         weight_bytes=mem["weight_bytes"], step_bytes=mem["decode_step_weight_bytes"],
                         prefill_tokens_per_s=med(rounds_rn, "prefill_tokens_per_s"),
                         decode_tokens_per_s=med(rounds_rn, "decode_tokens_per_s"),
                         load_seconds_rounds=[x["load_seconds"] for x in rounds_rn], rounds=rounds_rn)
    res["pytorch"] = dict(load_seconds=med(rounds_pt, "load_seconds"),
                          peak_rss_bytes=max(x["peak_rss_bytes"] for x in rounds_pt),
                          prefill_tokens_per_s=med(rounds_pt, "prefill_tokens_per_s"),
                          decode_tokens_per_s=med(rounds_pt, "decode_tokens_per_s"),
                          check_relative_difference_vs_retnet=rounds_pt[0]["check_relative_difference_vs_retnet"],
                          version=rounds_pt[0]["version"], rounds=rounds_pt)
    m, r = res["machine"], res["retnet"]
    step_params = r["step_bytes"] / 4
    # Retention per token and layer in the chunkwise form (chunk C): the state's read and update
    # (2 x 2·dk·dv per head) and at most a chunk's scores and their product with V.
    C = a.chunk_size or P
    retention_flops = h * (4 * (kd // h) * (vd // h) + 2 * C * (kd // h + vd // h))
    res["bounds"] = dict(
        float32_weight_bytes=r["weight_bytes"],
        peak_rss_over_weights=r["peak_rss_bytes"] / r["weight_bytes"] - 1,
        decode_bandwidth_bound_tokens_per_s=m["read_bandwidth_gb_per_s"] * 1e9 / r["step_bytes"],
        prompt_flops_per_token=2 * step_params + layers * retention_flops,
        prompt_gemm_bound_tokens_per_s=m["gemm_peak_gflops"] * 1e9 / (2 * step_params + layers * retention_flops))
    res["load_average_end"] = os.getloadavg()
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
