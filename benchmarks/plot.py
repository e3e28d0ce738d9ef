#!/usr/bin/python3
"""Plots of the benchmark results, written as PNG files to docs/img/.

From benchmarks/results/scaling.json (written by benchmarks/scaling.py):
  decode_vs_context.png   (a) decode latency (ms/token) and memory (RetNet state vs the
                          Transformer's KV cache, plus RetNet's peak RSS) against context length;
                          RetNet alone, and saying so, when the baseline was not built.
  prompt_vs_length.png    (b) prompt throughput (tokens/s) and peak RSS against prompt length T,
                          one line per form (parallel, chunkwise).
From benchmarks/results/compare.json (benchmarks/compare_pytorch.py), when it exists:
  compare_pytorch.png     retnet / PyTorch ratios of the comparison table.

    /usr/bin/python3 benchmarks/plot.py [--scaling FILE] [--compare FILE] [--out-dir docs/img]
Needs matplotlib (Debian's /usr/bin/python3 has it).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1e6


def describe(s):
    c = s["config"]
    return (f"d {c['decoder_embed_dim']}, Dv {c.get('decoder_value_embed_dim')}, {c['decoder_layers']} layers, "
            f"{c['decoder_retention_heads']} heads, vocab {c['vocab_size']}, float32, threads {s['threads']}, "
            f"{s['date'][:10]}")


def plot_decode(s, path):
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    dec = sorted(s["decode"], key=lambda r: r["context"])
    ctx = [r["context"] for r in dec]
    ax_t.plot(ctx, [r["decode_ms_per_step"] for r in dec], "o-", color="C0", label="RetNet (retnet bench)")
    ax_m.plot(ctx, [r["state_bytes"] / MB for r in dec], "o-", color="C0", label="RetNet state")
    if all("peak_rss_bytes" in r for r in dec):
        ax_m.plot(ctx, [r["peak_rss_bytes"] / MB for r in dec], "o--", color="C0", alpha=0.6,
                  label="RetNet peak RSS (whole process)")
    base = s.get("baseline", {})
    series = base.get("series", {}) if base.get("available") else {}
    tr = [p for p in series.get("transformer", []) if p["context"] is not None]
    rn = [p for p in series.get("retnet", []) if p["context"] is not None]
    if tr:
        ax_t.plot([p["context"] for p in tr], [p["ms_per_token"] for p in tr], "s-", color="C3",
                  label="Transformer, KV cache (baseline)")
        if all("kv_cache_bytes" in p for p in tr):
            ax_m.plot([p["context"] for p in tr], [p["kv_cache_bytes"] / MB for p in tr], "s-", color="C3",
                      label="Transformer KV cache")
    if rn:
        ax_t.plot([p["context"] for p in rn], [p["ms_per_token"] for p in rn], "^:", color="C0", alpha=0.7,
                  label="RetNet (baseline binary)")
    title = "Decoding one token after a context"
    params = [p["params"] for p in rn if "params" in p]
    if params and abs(params[0] * 4 - dec[0]["weight_bytes"]) > 0.01 * dec[0]["weight_bytes"]:
        title += "\n(note: the baseline binary ran its own config, not this one)"
    if not tr:
        why = base.get("reason", "no baseline results")
        title += f"\nRetNet alone: Transformer baseline missing ({why})"
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (tokens)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_ylabel("ms / token")
    ax_t.set_ylim(bottom=0)
    ax_m.set_ylabel("MB")
    ax_m.set_yscale("log")
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005, describe(s), ha="center", fontsize=8, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_prompt(s, path):
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    modes = sorted({r["mode"] for r in s["prompt"]})
    for i, mode in enumerate(modes):
        rows = sorted((r for r in s["prompt"] if r["mode"] == mode), key=lambda r: r["prompt_len"])
        T = [r["prompt_len"] for r in rows]
        ax_t.plot(T, [r["prefill_tokens_per_s"] for r in rows], "o-", color=f"C{i}", label=mode)
        ax_m.plot(T, [r["peak_rss_bytes"] / MB for r in rows], "o-", color=f"C{i}", label=f"{mode} peak RSS")
    w = s["prompt"][0]["weight_bytes"] / MB
    ax_m.axhline(w, color="gray", ls="--", lw=1, label=f"weights {w:.0f} MB")
    ax_t.set_ylabel("prompt tokens / s")
    ax_t.set_ylim(bottom=0)
    ax_m.set_ylabel("peak RSS (MB)")
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt length T (tokens)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    what = "state + last logits" if s.get("logits", "last") == "last" else "all logits"
    fig.suptitle(f"Reading a prompt ({what}), by form", fontsize=11)
    fig.text(0.5, 0.005, describe(s), ha="center", fontsize=8, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_compare(c, path):
    rows = [r for r in c["table"] if r.get("ratio") and "GFLOP" not in r["metric"]]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.5))
    names = [r["metric"] for r in rows][::-1]
    ratios = [r["ratio"] for r in rows][::-1]
    ax.barh(names, [x - 1 for x in ratios], left=1, color=["C2" if x >= 1 else "C3" for x in ratios])
    ax.axvline(1, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_xlim(min(ratios + [1]) / 1.5, max(ratios + [1]) * 1.5)
    for y, x in enumerate(ratios):
        ax.text(x, y, f" {x:.2f}×", va="center", fontsize=8)
    ax.set_xlabel("retnet advantage over PyTorch's best (×; >1 is better)")
    m = c["machine"]
    quick = " — quick sizes" if c["sizes"]["score_len"] < 2048 else ""
    ax.set_title(f"retnet vs PyTorch {m['torch']} ({m['cpu']}, {m['cores']} cores, {m['date'][:10]}{quick})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scaling", default=os.path.join(ROOT, "benchmarks", "results", "scaling.json"))
    ap.add_argument("--compare", default=os.path.join(ROOT, "benchmarks", "results", "compare.json"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "img"))
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    written = []
    if os.path.exists(a.scaling):
        s = json.load(open(a.scaling))
        for name, fn in (("decode_vs_context.png", plot_decode), ("prompt_vs_length.png", plot_prompt)):
            fn(s, os.path.join(a.out_dir, name))
            written.append(name)
    else:
        print(f"no {a.scaling}: run benchmarks/scaling.py first")
    if os.path.exists(a.compare):
        plot_compare(json.load(open(a.compare)), os.path.join(a.out_dir, "compare_pytorch.png"))
        written.append("compare_pytorch.png")
    for name in written:
        print(os.path.join(a.out_dir, name))


if __name__ == "__main__":
    main()
