#!/usr/bin/python3
"""Side-by-side benchmark of the retnet C++ library against PyTorch, in one run, on one machine.

What it measures (random float32 weights of one config, default benchmarks/configs/base.json):

  * decode tokens/s after a 512-token prompt, at batch 1 and batch 8 (64 greedy steps);
  * time to first token (TTFT) of a 2048-token prompt: the state plus the last position's
    logits only (retnet `--logits last`; PyTorch likewise), best of the parallel and
    chunkwise forms;
  * scoring throughput at T = 2048 with every position's logits, best of both forms, also as
    model GFLOP/s against the machine's measured sgemm peak;
  * retnet's peak RSS for a 16384-token chunkwise prompt against its weight bytes (and, for
    comparison, the same prompt through the PyTorch model in its own process);
  * retnet's decode ms/step at context 16 and at context 8192, at the same thread count;
  * the machine's limits in the same harness: sgemm GFLOP/s (torch.mm, float32, model-like
    shapes) and memory read bandwidth (summing a 1 GB float32 array).

The two pairs whose ratio is a target (batch 8 against batch 1, context 8192 against 16) run
alternately, A B A B, for --rounds rounds at each thread count, and each side keeps its median
round: on a shared machine whose speed drifts over minutes, pairs side by side compare like
with like.

The PyTorch side is the project's PyTorch RetNet decoder, scripts/reference/retnet_torch.py
(docs/NUMERICS.md with torchscale's op structure, three forms: parallel, chunkwise and a
recurrent step used for decoding).
Every PyTorch measurement runs at 1 and at 2 threads, each in its own subprocess (thread pools
fight), and PyTorch's best is reported; retnet likewise runs at 1 and 2 threads (--retnet-threads)
and its best is reported. Medians of --repeat runs after a warm-up (retnet's CLI has no
warm-up run of its own: its median includes the first run).

By default (--torch-numerics consistent) every form divides retention row n by
sqrt(sum_{i<=n} gamma^i), torchscale's decay normalisation, so the forms agree to rounding;
--torch-numerics torchscale adds torchscale's data-dependent row scales (|qk| row sums, the
chunkwise inner/cross scales), which the group norm cancels only up to its eps.

Before measuring, the three PyTorch forms are checked against each other (max relative
difference of logits and of the decoded logits after each form's state hand-off), against
the torchscale fixture (tests/data/torchscale-tiny) and against the NumPy reference of
docs/NUMERICS.md (scripts/reference/retnet.py) on a tiny random config saved as safetensors.

Run with Debian's python (torch, numpy):

    /usr/bin/python3 benchmarks/compare_pytorch.py                   # full run, minutes
    /usr/bin/python3 benchmarks/compare_pytorch.py --quick --config /tmp/small.json
    /usr/bin/python3 benchmarks/compare_pytorch.py --check-only      # form agreement only

Prints the agreement numbers, then a Markdown table (metric, retnet, PyTorch best (threads),
ratio, target, met?), and writes every raw number to --out (benchmarks/results/compare.json).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

from retnet_bench import run_retnet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from reference import retnet as numpy_reference  # noqa: E402
from reference.retnet_torch import Config, RetNetDecoder, check_forms, load_model_dir, rel_diff  # noqa: E402
from reference.safetensors_io import write_safetensors  # noqa: E402

# Problem sizes of a full run and of a --quick smoke test.
SIZES = {
    "full": dict(decode_prompt=512, decode_steps=64, decode_batch=8, ttft_len=2048, score_len=2048,
                 memory_len=16384, context_short=16, context_long=8192, bandwidth_mb=1024,
                 sgemm_rows=2048),
    "quick": dict(decode_prompt=64, decode_steps=8, decode_batch=8, ttft_len=256, score_len=256,
                  memory_len=2048, context_short=16, context_long=1024, bandwidth_mb=128,
                  sgemm_rows=256),
}


def run_checks(verbose=True):
    """Form agreement (float32 and float64), torchscale fixture, NumPy reference; for both
    numerics (see MultiScaleRetention)."""
    out = {}
    tiny = {"vocab_size": 97, "decoder_embed_dim": 64, "decoder_value_embed_dim": 112,
            "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 96, "decoder_layers": 2,
            "activation_fn": "swish", "use_glu": True, "layernorm_eps": 1e-6,
            "no_scale_embedding": True, "recurrent_chunk_size": 5}
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 97, (2, 23), generator=gen)  # 23 = 4 chunks of 5 + a tail of 3
    fixture = os.path.join(ROOT, "tests", "data", "torchscale-tiny")
    ref_logits = None
    for numerics in ("consistent", "torchscale"):
        ts = numerics == "torchscale"
        for dtype in (torch.float32, torch.float64):
            model = RetNetDecoder(Config(tiny), dtype, ts).randomize(1).eval()
            out[f"{numerics}: tiny random model, {str(dtype)[6:]}, 2 x 23 tokens, chunk 5"], _ = \
                check_forms(model, tokens, chunk=5)

        model, cfg = load_model_dir(fixture, torchscale=ts)
        toks = torch.from_numpy(np.load(os.path.join(fixture, "tokens.npy"))).long()
        want = torch.from_numpy(np.load(os.path.join(fixture, "logits.npy")))
        agree, logits = check_forms(model, toks, chunk=cfg.get("recurrent_chunk_size", 4))
        out[f"{numerics}: torchscale-tiny fixture, float32"] = dict(
            agree, **{f"{f}_vs_torchscale": rel_diff(l, want) for f, l in logits.items()})

        model = RetNetDecoder(Config(tiny), torch.float32, ts).randomize(5).eval()
        if ref_logits is None:  # the same weights both times: run the reference once
            with tempfile.TemporaryDirectory() as d:
                json.dump(tiny, open(os.path.join(d, "config.json"), "w"))
                write_safetensors(os.path.join(d, "model.safetensors"),
                                  {k: v.numpy() for k, v in model.state_dict().items()}, "F32")
                logits64 = numpy_reference.logits(d, tokens[0].numpy())
                ref_logits = torch.from_numpy(logits64.astype(np.float32))
        with torch.inference_mode():
            out[f"{numerics}: NumPy reference (scripts/reference/retnet.py), tiny random model, float32"] = {
                f"{f}_vs_reference": rel_diff(model(tokens[:1], f, chunk=5)[0][0], ref_logits)
                for f in ("parallel", "chunkwise", "recurrent")}
    if verbose:
        print("PyTorch model, max relative difference of logits (max|a-b| / max|b|):")
        for group, numbers in out.items():
            print(f"  {group}:")
            print("    " + ", ".join(f"{k} {v:.1e}" for k, v in numbers.items()))
    return out


# =============================================================================================
# Worker processes (one per thread count): PyTorch model timings and machine limits
# =============================================================================================
def median_time(fn, repeat, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def worker_model(p):
    """PyTorch decode, TTFT and scoring timings at this process's thread count."""
    cfg = Config(p["config"])
    s, repeat = p["sizes"], p["repeat"]
    model = RetNetDecoder(cfg, torch.float32, p["torchscale"]).randomize(0).eval()
    gen = torch.Generator().manual_seed(7)
    res = {}
    with torch.inference_mode():
        for key, T, logits in (("ttft", s["ttft_len"], "last"), ("score", s["score_len"], "all")):
            prompt = torch.randint(0, cfg.vocab, (1, T), generator=gen)
            for form in ("parallel", "chunkwise"):
                med, times = median_time(lambda: model(prompt, form, logits=logits), repeat)
                res[f"{key}_{form}"] = dict(seconds=med, times=times, tokens_per_s=T / med)
                log(f"  torch {p['threads']} thr {key} {form}: {med:.3f} s")
        for batch in (1, s["decode_batch"]):
            prompt = torch.randint(0, cfg.vocab, (batch, s["decode_prompt"]), generator=gen)
            _, prefilled = model(prompt, "chunkwise", logits="none")
            steps = s["decode_steps"]

            def decode():  # the step makes new state tensors: `prefilled` is not changed
                state, nxt = prefilled, prompt[:, -1:]
                for _ in range(steps):
                    logits, state = model.step(nxt, state)
                    nxt = logits[:, -1].argmax(-1, keepdim=True)

            med, times = median_time(decode, repeat)
            res[f"decode_b{batch}"] = dict(seconds=med, times=times, tokens_per_s=batch * steps / med,
                                          ms_per_step=1000 * med / steps, batch=batch,
                                          state_bytes=prefilled.nbytes())
            log(f"  torch {p['threads']} thr decode batch {batch}: {1000 * med / steps:.2f} ms/step")
    return res


def worker_memory(p):
    """Peak RSS of one chunkwise prompt of memory_len tokens through the PyTorch model."""
    cfg = Config(p["config"])
    rss_start = current_rss()  # the interpreter with torch loaded
    model = RetNetDecoder(cfg, torch.float32, p["torchscale"]).randomize(0).eval()
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    rss_before = current_rss()
    T = p["sizes"]["memory_len"]
    prompt = torch.randint(0, cfg.vocab, (1, T), generator=torch.Generator().manual_seed(7))
    t0 = time.perf_counter()
    with torch.inference_mode():
        model(prompt, "chunkwise", logits="last")
    return dict(tokens=T, seconds=time.perf_counter() - t0, weight_bytes=weight_bytes, rss_start_bytes=rss_start,
                rss_after_model_bytes=rss_before, peak_rss_bytes=peak_rss())


def read_bandwidth(method, array, reduce):
    """GB/s of reading `array` once (best of 5 after a warm-up)."""
    seconds = min(median_time(lambda: reduce(array), 5)[1])
    nbytes = array.nbytes if isinstance(array, np.ndarray) else array.numel() * array.element_size()
    return dict(method=method, bytes=nbytes, seconds=seconds, gb_per_s=nbytes / seconds / 1e9)


def worker_machine(p):
    """sgemm GFLOP/s of model-like shapes and read bandwidth (sum of a large float32 array)."""
    s, threads = p["sizes"], p["threads"]
    cfg = Config(p["config"])
    m = s["sgemm_rows"]
    shapes = [(m, cfg.d, cfg.dv_total), (m, cfg.dv_total, cfg.d), (m, cfg.d, cfg.ffn),
              (m, cfg.d, cfg.vocab)]
    gemm = []
    for (M, K, N) in shapes:
        a, w = torch.randn(M, K), torch.randn(N, K)
        b = w.t().contiguous()
        for layout, fn in (("A@B", lambda: torch.mm(a, b)), ("linear A@W^T", lambda: F.linear(a, w))):
            best = min(median_time(fn, 5)[1])
            gemm.append(dict(m=M, k=K, n=N, layout=layout, seconds=best, gflops=2 * M * K * N / best / 1e9))
        log(f"  sgemm {threads} thr {M}x{K}x{N}: {max(g['gflops'] for g in gemm[-2:]):.1f} GFLOP/s")
    n = s["bandwidth_mb"] * (1 << 20) // 4
    bw = [read_bandwidth("torch.sum", torch.ones(n, dtype=torch.float32), lambda x: x.sum())]
    if threads == 1:  # numpy's sum is single-threaded
        bw.append(read_bandwidth("numpy.sum", np.ones(n, dtype=np.float32), lambda x: x.sum()))
    log(f"  read bandwidth {threads} thr: {max(b['gb_per_s'] for b in bw):.1f} GB/s")
    return dict(sgemm=gemm, bandwidth=bw)


def proc_status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def current_rss():
    return proc_status("VmRSS")


def peak_rss():
    """VmHWM, this process image's peak RSS (ru_maxrss would include the parent's)."""
    return proc_status("VmHWM")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


WORKERS = {"model": worker_model, "memory": worker_memory, "machine": worker_machine}


def run_worker(task, threads, params):
    """Runs WORKERS[task] in a fresh interpreter pinned to `threads` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    params = dict(params, threads=threads)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", task,
                           "--threads", str(threads)], input=json.dumps(params), env=env,
                          stdout=subprocess.PIPE, stderr=None, text=True)
    if proc.returncode:
        raise SystemExit(f"worker {task} ({threads} threads) failed with status {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# =============================================================================================
# retnet runs
# =============================================================================================

def alternating_retnet(cli, config, threads_list, repeat, rounds, key, runs, sides):
    """Retnet bench runs of one or more `sides` [(name, label, flags)], run alternately
    (A B A B ...) `rounds` times at each thread count: with two sides whose ratio is a target,
    drift in a shared machine's speed falls on both alike. Returns {name: {threads: the run with
    the median `key` of its rounds}}."""
    found = {name: {} for name, _, _ in sides}
    for t in threads_list:
        done = {name: [] for name, _, _ in sides}
        for _ in range(rounds):
            for name, label, flags in sides:
                r = run_retnet(cli, config, t, repeat, **flags)
                runs.append(dict(r, label=label))
                done[name].append(r)
                log(f"  retnet {t} thr {label}: {key} = {r[key]:.4g}")
        for name, rs in done.items():
            found[name][t] = sorted(rs, key=lambda r: r[key])[len(rs) // 2]
    return found


# =============================================================================================
# Main: run everything, print the table, write the JSON
# =============================================================================================

def binary_info(cli):
    """The CLI's modification time, and whether a library or CLI source is newer (a stale build)."""
    sources = [os.path.join(dp, f) for top in ("include", "tools") for dp, _, fs in os.walk(os.path.join(ROOT, top))
               for f in fs if f.endswith((".hpp", ".cpp", ".h"))]
    built = os.path.getmtime(cli)
    newest = max((os.path.getmtime(f) for f in sources), default=0)
    return dict(retnet_binary=os.path.abspath(cli),
                retnet_binary_mtime=datetime.datetime.fromtimestamp(built).astimezone().isoformat(timespec="seconds"),
                retnet_binary_older_than_sources=newest > built)


def torch_blas():
    """The BLAS library this process's torch multiplies with (from /proc/self/maps). Debian's
    python3-torch links libblas.so.3, whatever the alternatives system selects: with the
    reference BLAS (package libblas3 alone) torch's sgemm ran at 6 GFLOP/s on a machine where
    OpenBLAS (libopenblas0-pthread) gives about 100 per thread, which would make PyTorch a
    straw man."""
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if "blas" in line.split()[-1].lower()})
    return os.path.realpath(libs[0]) if libs else "unknown"


def machine_info():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True).stdout.strip())
    except OSError:
        commit, dirty = "unknown", None
    blas = torch_blas()
    if "openblas" not in blas and "mkl" not in blas:
        log(f"WARNING: torch multiplies with {blas}, not an optimised BLAS; install libopenblas0-pthread")
    return dict(cpu=cpu, cores=os.cpu_count(), torch=torch.__version__, torch_blas=blas, numpy=np.__version__,
                python=platform.python_version(), platform=platform.platform(),
                date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                retnet_commit=commit, retnet_tree_modified=dirty, load_average_start=os.getloadavg())


def measure_machine(params, threads_list):
    limits = {t: run_worker("machine", t, params) for t in threads_list}
    gemm, gemm_t = max(((g, t) for t, r in limits.items() for g in r["sgemm"]), key=lambda x: x[0]["gflops"])
    bw, bw_t = max(((b, t) for t, r in limits.items() for b in r["bandwidth"]), key=lambda x: x[0]["gb_per_s"])
    return dict(per_threads=limits, sgemm_peak_gflops=gemm["gflops"], sgemm_peak_threads=gemm_t,
                sgemm_peak_shape=gemm, read_bandwidth_gb_per_s=bw["gb_per_s"], read_bandwidth_threads=bw_t,
                read_bandwidth_method=bw["method"])


def measure_retnet(a, sizes, chunk, threads_list):
    """Every retnet measurement, best over the thread counts; returns (best runs, all runs)."""
    runs, best = [], {}

    def pair(key, maximize, sides, rounds=a.rounds):
        """Each side's best over the thread counts (of its median round)."""
        found = alternating_retnet(a.retnet, a.config, threads_list, a.repeat, rounds, key, runs, sides)
        for name, per_threads in found.items():
            best[name] = (max if maximize else min)(per_threads.values(), key=lambda r: r[key])
        return found

    def run(name, label, key, maximize, **flags):
        pair(key, maximize, [(name, label, flags)], rounds=1)

    nb, prompt, steps = sizes["decode_batch"], sizes["decode_prompt"], sizes["decode_steps"]
    decode = dict(prompt_len=prompt, gen_len=steps, mode="chunkwise", logits="last")
    pair("decode_tokens_per_s", True, [("decode_b1", "decode batch 1", dict(decode, batch=1)),
                                       ("decode_bN", f"decode batch {nb}", dict(decode, batch=nb))])
    for form in ("parallel", "chunkwise"):
        run(f"ttft_{form}", f"ttft {form}", "prefill_seconds", False, prompt_len=sizes["ttft_len"],
            gen_len=0, mode=form, chunk_size=chunk, logits="last")
        run(f"score_{form}", f"score {form}", "prefill_tokens_per_s", True, prompt_len=sizes["score_len"],
            gen_len=0, mode=form, chunk_size=chunk, logits="all")
    # Both contexts at the thread count where the short context decodes fastest.
    contexts = pair("decode_ms_per_step", False, [
        (ctx, f"decode at context {sizes[ctx]}", dict(prompt_len=sizes[ctx], gen_len=steps, mode="chunkwise",
                                                      chunk_size=chunk, logits="last"))
        for ctx in ("context_short", "context_long")])
    best["context_long"] = contexts["context_long"][best["context_short"]["threads"]]
    # one run in a fresh process: peak RSS covers every repeat of a process
    best["memory"] = run_retnet(a.retnet, a.config, max(threads_list), 1, prompt_len=sizes["memory_len"],
                                gen_len=0, mode="chunkwise", chunk_size=chunk, logits="last")
    runs.append(dict(best["memory"], label="memory"))
    log(f"  retnet memory {sizes['memory_len']}: peak RSS {best['memory']['peak_rss_bytes'] / 1e6:.1f} MB")
    return best, runs


def summarize(cfg, sizes, limits, rn, pt, pt_mem):
    """Derived numbers and the table rows: (metric, retnet, PyTorch, ratio, target, met, detail)."""
    def pt_best(keys, metric, maximize):
        return (max if maximize else min)((pt[t][k][metric], t, k) for t in pt for k in keys)

    weight_bytes = rn["decode_b1"]["weight_bytes"]
    bw = limits["read_bandwidth_gb_per_s"] * 1e9
    streamed = weight_bytes - (0 if cfg.tied else cfg.vocab * cfg.d * 4)  # a step reads one embedding row
    bound = bw / weight_bytes
    layer_params, logit_params = cfg.matmul_params()
    flops_per_token = 2 * (layer_params + logit_params)
    T, B = sizes["score_len"], cfg.chunk
    retention_flops = {  # per token, all layers: q.k and .v over the window, q.S and the state update
        "parallel": cfg.layers * 2 * T * (cfg.d + cfg.dv_total),
        "chunkwise": cfg.layers * (2 * B * (cfg.d + cfg.dv_total) + 4 * cfg.d * cfg.dv)}
    peak = limits["sgemm_peak_gflops"]

    b1, bN, mem = rn["decode_b1"], rn["decode_bN"], rn["memory"]
    t_b1, t_b1_thr, _ = pt_best(["decode_b1"], "tokens_per_s", True)
    t_bN, t_bN_thr, _ = pt_best([f"decode_b{sizes['decode_batch']}"], "tokens_per_s", True)
    r_ttft = min(rn["ttft_parallel"], rn["ttft_chunkwise"], key=lambda r: r["prefill_seconds"])
    t_ttft, t_ttft_thr, t_ttft_k = pt_best(["ttft_parallel", "ttft_chunkwise"], "seconds", False)
    r_score = max(rn["score_parallel"], rn["score_chunkwise"], key=lambda r: r["prefill_tokens_per_s"])
    t_score, t_score_thr, t_score_k = pt_best(["score_parallel", "score_chunkwise"], "tokens_per_s", True)
    r_gflops = r_score["prefill_tokens_per_s"] * flops_per_token / 1e9
    t_gflops = t_score * flops_per_token / 1e9
    short, long_ = rn["context_short"], rn["context_long"]
    growth = long_["decode_ms_per_step"] / short["decode_ms_per_step"] - 1
    batch_gain = bN["decode_tokens_per_s"] / b1["decode_tokens_per_s"]
    over = mem["peak_rss_bytes"] - weight_bytes
    form = lambda k: k.split("_")[1]  # noqa: E731
    d = sizes["decode_prompt"]
    rows = [
        (f"decode tok/s, batch 1, after {d}", f"{b1['decode_tokens_per_s']:.1f} ({b1['threads']} thr)",
         f"{t_b1:.1f} ({t_b1_thr} thr)", b1["decode_tokens_per_s"] / t_b1,
         f"≥ 75 % of bandwidth bound {bound:.1f} tok/s", b1["decode_tokens_per_s"] >= 0.75 * bound,
         f"{100 * b1['decode_tokens_per_s'] / bound:.0f} %"),
        (f"decode tok/s, batch {sizes['decode_batch']}, after {d}",
         f"{bN['decode_tokens_per_s']:.1f} ({bN['threads']} thr)", f"{t_bN:.1f} ({t_bN_thr} thr)",
         bN["decode_tokens_per_s"] / t_bN, "≥ 4 × batch 1", batch_gain >= 4, f"{batch_gain:.1f} ×"),
        (f"TTFT, {sizes['ttft_len']}-token prompt (ms)",
         f"{1000 * r_ttft['prefill_seconds']:.1f} ({r_ttft['mode']}, {r_ttft['threads']} thr)",
         f"{1000 * t_ttft:.1f} ({form(t_ttft_k)}, {t_ttft_thr} thr)", t_ttft / r_ttft["prefill_seconds"],
         "≥ 1.5 × faster than PyTorch", t_ttft / r_ttft["prefill_seconds"] >= 1.5, ""),
        (f"scoring tok/s, T = {T}, all logits",
         f"{r_score['prefill_tokens_per_s']:.0f} ({r_score['mode']}, {r_score['threads']} thr)",
         f"{t_score:.0f} ({form(t_score_k)}, {t_score_thr} thr)", r_score["prefill_tokens_per_s"] / t_score,
         "≥ 1.2 × PyTorch", r_score["prefill_tokens_per_s"] / t_score >= 1.2, ""),
        (f"scoring model GFLOP/s, T = {T}", f"{r_gflops:.1f}", f"{t_gflops:.1f}", r_gflops / t_gflops,
         f"≥ 70 % of sgemm peak {peak:.1f}", r_gflops >= 0.7 * peak, f"{100 * r_gflops / peak:.0f} %"),
        (f"peak RSS, {sizes['memory_len']}-token chunkwise prompt (MB)", f"{mem['peak_rss_bytes'] / 1e6:.1f}",
         f"{pt_mem['peak_rss_bytes'] / 1e6:.1f} (1 thr)", pt_mem["peak_rss_bytes"] / mem["peak_rss_bytes"],
         f"≤ weights {weight_bytes / 1e6:.1f} + 64 MiB", over <= 64 * 2 ** 20, f"+{over / 2 ** 20:.1f} MiB"),
        (f"decode ms/step, context {sizes['context_short']} → {sizes['context_long']}",
         f"{short['decode_ms_per_step']:.2f} → {long_['decode_ms_per_step']:.2f} ({short['threads']} thr)",
         "—", None,
         "≤ +10 %", growth <= 0.10, f"{100 * growth:+.1f} %"),
    ]
    derived = dict(
        weight_bytes=weight_bytes, bytes_read_per_decode_step=streamed,
        bandwidth_bound_tokens_per_s=bound, bandwidth_bound_without_embedding_table=bw / streamed,
        decode_b1_fraction_of_bound=b1["decode_tokens_per_s"] / bound,
        decode_b1_fraction_of_bound_without_embedding_table=b1["decode_tokens_per_s"] * streamed / bw,
        decode_batch_gain=batch_gain,
        flops_counted="2 x (non-embedding matmul params + vocab x d) per token; retention's own FLOPs "
                      "not included (retention_flops_per_token lists them per form)",
        model_flops_per_token=flops_per_token, retention_flops_per_token=retention_flops,
        retnet_scoring_gflops=r_gflops, pytorch_scoring_gflops=t_gflops,
        retnet_scoring_gflops_with_retention=r_score["prefill_tokens_per_s"]
        * (flops_per_token + retention_flops[r_score["mode"]]) / 1e9,
        ttft_speedup=t_ttft / r_ttft["prefill_seconds"], scoring_speedup=r_score["prefill_tokens_per_s"] / t_score,
        memory_over_weights_bytes=over, decode_latency_growth=growth)
    return rows, derived


def print_report(results, rows, quick):
    m, ml, dv = results["machine"], results["machine_limits"], results["derived"]
    g = ml["sgemm_peak_shape"]
    print()
    print(f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m.get('torch_blas', 'BLAS unknown')}), "
          f"retnet {m['retnet_commit']}"
          f"{' (modified tree)' if m['retnet_tree_modified'] else ''}; load average "
          f"{m['load_average_start'][0]:.2f} at start, {m['load_average_end'][0]:.2f} at end")
    if m["retnet_binary_older_than_sources"]:
        print(f"WARNING: {m['retnet_binary']} is older than the sources in include/ or tools/: rebuild it")
    print(f"sgemm peak {ml['sgemm_peak_gflops']:.1f} GFLOP/s ({g['m']}x{g['k']}x{g['n']}, {g['layout']}, "
          f"{ml['sgemm_peak_threads']} thr); read bandwidth {ml['read_bandwidth_gb_per_s']:.1f} GB/s "
          f"({ml['read_bandwidth_method']}, {ml['read_bandwidth_threads']} thr)")
    print(f"config {results['config_path']}: weights {dv['weight_bytes'] / 1e6:.1f} MB; medians of "
          f"{results['repeat']} (paired measurements: median of {results['rounds']} alternating rounds)"
          f"{' (quick sizes)' if quick else ''}; PyTorch numerics: {results['torch_numerics']}")
    print()
    print("| metric | retnet | PyTorch best (threads) | ratio | target | met? |")
    print("|---|---|---|---|---|---|")
    for name, r, t, ratio, target, ok, extra in rows:
        ratio_s = "—" if ratio is None else f"{ratio:.2f} ×"
        met = ("yes" if ok else "**no**") + (f" ({extra})" if extra else "")
        print(f"| {name} | {r} | {t} | {ratio_s} | {target} | {met} |")
    print()
    print("ratio: how many times better retnet is (throughput ratio, PyTorch time / retnet time, or PyTorch\n"
          "memory / retnet memory). Bandwidth bound = read bandwidth / weight bytes; a step reads "
          f"{dv['bytes_read_per_decode_step'] / 1e6:.1f} MB\n(no embedding table), bound "
          f"{dv['bandwidth_bound_without_embedding_table']:.1f} tok/s, batch-1 decode at "
          f"{100 * dv['decode_b1_fraction_of_bound_without_embedding_table']:.0f} % of it. Model FLOPs: "
          f"{dv['model_flops_per_token'] / 1e6:.1f} M/token = {dv['flops_counted']};\nwith them retnet's "
          f"scoring runs at {dv['retnet_scoring_gflops_with_retention']:.1f} GFLOP/s.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--retnet", default=os.path.join(ROOT, "build-rel", "tools", "retnet"))
    ap.add_argument("--config", default=os.path.join(ROOT, "benchmarks", "configs", "base.json"))
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (median)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds of the paired retnet measurements (batch 1 and batch N, "
                         "the two contexts); the median round of each side is kept")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "compare.json"))
    ap.add_argument("--torch-threads", default="1,2", help="PyTorch thread counts to try")
    ap.add_argument("--retnet-threads", default="1,2", help="retnet thread counts to try")
    ap.add_argument("--torch-numerics", choices=["consistent", "torchscale"], default="consistent",
                    help="PyTorch model's row scales: the forms agree to rounding (consistent) or "
                         "torchscale's own data-dependent scales as well")
    ap.add_argument("--check-only", action="store_true", help="only check the PyTorch model's forms")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:  # a child process: parameters on stdin, one JSON line on stdout
        torch.set_num_threads(a.threads)
        print(json.dumps(WORKERS[a.worker](json.loads(sys.stdin.read()))))
        return

    checks = run_checks()
    if a.check_only:
        return
    if not os.access(a.retnet, os.X_OK):
        raise SystemExit(f"no retnet CLI at {a.retnet}; build it (see README) or pass --retnet")
    sizes = SIZES["quick" if a.quick else "full"]
    cfg_dict = json.load(open(a.config))
    cfg = Config(cfg_dict)
    torch_threads = [int(t) for t in a.torch_threads.split(",")]
    retnet_threads = [int(t) for t in a.retnet_threads.split(",")]
    params = dict(config=cfg_dict, sizes=sizes, repeat=a.repeat, torchscale=a.torch_numerics == "torchscale")
    results = dict(machine=dict(machine_info(), **binary_info(a.retnet)), config_path=os.path.abspath(a.config), config=cfg_dict,
                   sizes=sizes, repeat=a.repeat, rounds=a.rounds, torch_numerics=a.torch_numerics, checks=checks)

    log("machine limits (sgemm, read bandwidth)...")
    results["machine_limits"] = measure_machine(params, torch_threads)
    log("retnet bench runs...")
    rn, runs = measure_retnet(a, sizes, cfg.chunk, retnet_threads)
    results["retnet"] = dict(best=rn, runs=runs)
    log("PyTorch runs...")
    pt = {t: run_worker("model", t, params) for t in torch_threads}
    pt_mem = run_worker("memory", 1, params)
    results["pytorch"] = dict(per_threads=pt, memory=pt_mem)

    rows, results["derived"] = summarize(cfg, sizes, results["machine_limits"], rn, pt, pt_mem)
    results["machine"]["load_average_end"] = os.getloadavg()
    results["table"] = [dict(metric=n, retnet=r, pytorch=t, ratio=q, target=g, met=bool(ok), detail=x)
                        for n, r, t, q, g, ok, x in rows]
    print_report(results, rows, a.quick)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"raw numbers: {a.out}")


if __name__ == "__main__":
    main()
