"""Attention over ragged batches: naive vs BASS-PAD vs BASS-SPLIT vs the ragged Triton kernel.

    python -m minibass.bench attention [--device cpu|cuda] [--quick]

Sweeps batch size, new tokens per sequence (the draft length + 1 of a verify step, or 1 for
decode) and the spread of cache lengths (0 = all equal, 0.95 = highly ragged), and reports per
backend: time, computed / useful FLOPs (the waste), kernel launches and the bandwidth achieved
against the minimum bytes the strategy must touch (``minibass.attention.cost``).

On the CPU the ragged kernel runs in Triton's interpreter (NumPy, one program at a time): its
time measures the interpreter, not the kernel, and is labelled so. The CPU numbers that mean
something are padded vs split vs naive, and the waste / launch accounting. On a GPU, at
Llama-7B shapes, it also times ``scaled_dot_product_attention`` on the padded layout and, when
installed, flash-attn's ``flash_attn_varlen_func``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch

from minibass.attention import BACKENDS, cost, triton_available
from .common import Parser, parse, positive_int, provenance, pyplot, result_path, save_plot, timed, write_json

CPU_SHAPE = dict(n_heads=8, n_kv_heads=8, head_dim=64, mean_kv=256, dtype=torch.float32)
GPU_SHAPE = dict(n_heads=32, n_kv_heads=32, head_dim=128, mean_kv=2048, dtype=torch.float16)  # Llama-7B


def ragged_lengths(batch, new_tokens, mean_kv, spread, seed=0):
    """kv lengths uniform in mean * [1 - spread, 1 + spread], at least new_tokens."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(batch, generator=g) * 2 - 1
    kv = (mean_kv * (1 + spread * u)).round().long().clamp(min=new_tokens)
    return torch.full((batch,), new_tokens), kv


def make_inputs(q_lens, kv_lens, n_heads, n_kv_heads, head_dim, dtype, device):
    g = torch.Generator(device=device).manual_seed(1)  # drawn where they are used: GBs on a GPU
    batch, capacity = len(kv_lens), int(kv_lens.max())
    q = torch.randn(int(q_lens.sum()), n_heads, head_dim, generator=g, device=device).to(dtype)
    k = torch.randn(batch, n_kv_heads, capacity, head_dim, generator=g, device=device).to(dtype)
    v = torch.randn(batch, n_kv_heads, capacity, head_dim, generator=g, device=device).to(dtype)
    return q, k, v, q_lens.to(device), kv_lens.to(device)


def median_time(fn, device, reps):
    fn()  # warm-up (and compilation for the Triton kernel)
    return statistics.median(timed(fn, device=device)[0] for _ in range(reps))


def gpu_baselines(q, k, v, q_lens, kv_lens):
    """Extra GPU contenders, on the layouts they need (built outside the timed region)."""
    from torch.nn.functional import scaled_dot_product_attention

    batch, n_kv_heads, _, head_dim = k.shape
    n_heads, tq, tk = q.shape[1], int(q_lens.max()), int(kv_lens.max())
    q_pad = q.view(batch, tq, n_heads, head_dim).transpose(1, 2)  # equal q_lens in this sweep: (B, H, Tq, D)
    group = n_heads // n_kv_heads
    k_pad, v_pad = k[:, :, :tk].repeat_interleave(group, 1), v[:, :, :tk].repeat_interleave(group, 1)
    pos = (kv_lens - q_lens)[:, None] + torch.arange(tq, device=q.device)  # (B, Tq)
    keys = torch.arange(tk, device=q.device)
    mask = (keys[None, None] <= pos[:, :, None]) & (keys[None, None] < kv_lens[:, None, None])  # (B, Tq, Tk)
    contenders = {"sdpa_padded": lambda: scaled_dot_product_attention(q_pad, k_pad, v_pad, attn_mask=mask[:, None])}
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return contenders
    k_packed = torch.cat([k[b, :, :n].transpose(0, 1) for b, n in enumerate(kv_lens.tolist())])  # (total_k, Hk, D)
    v_packed = torch.cat([v[b, :, :n].transpose(0, 1) for b, n in enumerate(kv_lens.tolist())])
    cu_q = torch.nn.functional.pad(q_lens.cumsum(0), (1, 0)).int()
    cu_k = torch.nn.functional.pad(kv_lens.cumsum(0), (1, 0)).int()
    contenders["flash_attn_varlen"] = lambda: flash_attn_varlen_func(q, k_packed, v_packed, cu_q, cu_k, tq, tk,
                                                                     causal=True)
    return contenders


def run(device, batches, new_tokens_list, spreads, reps, out, plot):
    shape = GPU_SHAPE if device.startswith("cuda") else CPU_SHAPE
    interpreted = not device.startswith("cuda")
    backends = {name: fn for name, fn in BACKENDS.items() if name != "ragged" or triton_available()}
    if len(backends) < len(BACKENDS):
        print("Triton is not installed here (it installs on Linux only): the 'ragged' backend is left out")
    rows = []
    shape_info = {k: (str(v) if k == "dtype" else v) for k, v in shape.items()}
    # naive (slow on purpose) and the interpreted kernel are timed once per cell, the rest ``reps`` times
    once = {"naive"} | ({"ragged"} if interpreted else set())
    timed_calls = {name: 1 if name in once else reps for name in backends}
    payload = {"provenance": provenance(device), "shape": shape_info, "reps": reps, "timed_calls": timed_calls,
               "rows": rows}
    for batch, new_tokens, spread in itertools.product(batches, new_tokens_list, spreads):
        q_lens, kv_lens = ragged_lengths(batch, new_tokens, shape["mean_kv"], spread)
        inputs = make_inputs(q_lens, kv_lens, shape["n_heads"], shape["n_kv_heads"], shape["head_dim"],
                             shape["dtype"], device)
        c = cost(q_lens, kv_lens, n_heads=shape["n_heads"], n_kv_heads=shape["n_kv_heads"],
                 head_dim=shape["head_dim"], bytes_per_element=shape["dtype"].itemsize)
        row = {"batch": batch, "new_tokens": new_tokens, "spread": spread, "kv_lens": kv_lens.tolist(),
               "useful_gflop": c.useful_flops / 1e9, "backends": {}}
        contenders = {name: (lambda fn=fn: fn(*inputs)) for name, fn in backends.items()}
        if not interpreted:
            contenders.update(gpu_baselines(*inputs))
        for name, fn in contenders.items():
            seconds = median_time(fn, device, timed_calls.setdefault(name, reps))  # (GPU baselines: reps)
            entry = {"ms": seconds * 1e3}
            if name in c.flops:
                entry.update(waste=c.waste(name), launches=c.launches[name],
                             gb_per_s=c.bytes[name] / seconds / 1e9)
            if name == "ragged" and interpreted:
                entry["note"] = "Triton interpreter on the CPU: time not meaningful"
            row["backends"][name] = entry
        rows.append(row)
        write_json(out, payload)  # after every row: a run stopped early keeps what it measured
        summary = "  ".join(f"{n}={e['ms']:.2f}ms" + ("(interp)" if "note" in e else "")
                            for n, e in row["backends"].items())
        print(f"B={batch:<3} q={new_tokens} spread={spread:<4} pad-waste={c.waste('padded'):.2f}x  {summary}",
              flush=True)
    print(f"wrote {out}")
    if plot:
        print(f"wrote {make_plot(payload, plot)}")
    return payload


def make_plot(payload, path):
    """Time vs batch size per backend, one panel per spread, at the largest new-token count."""
    import matplotlib.ticker

    plt = pyplot()

    rows = payload["rows"]
    spreads = sorted({r["spread"] for r in rows})
    q = max(r["new_tokens"] for r in rows)
    fig, axes = plt.subplots(1, len(spreads), figsize=(4.5 * len(spreads), 3.6), sharey=True, squeeze=False)
    for ax, spread in zip(axes[0], spreads):
        sel = sorted((r for r in rows if r["spread"] == spread and r["new_tokens"] == q), key=lambda r: r["batch"])
        for name in sel[0]["backends"]:
            label = name + (" (interpreted)" if "note" in sel[0]["backends"][name] else "")
            ax.plot([r["batch"] for r in sel], [r["backends"][name]["ms"] for r in sel], "o-", label=label)
        waste = sel[-1]["backends"]["padded"]["waste"]
        ax.set(title=f"spread {spread} (PAD waste {waste:.2f}x at B={sel[-1]['batch']})", xlabel="batch size",
               xscale="log", yscale="log")
        ax.set_xticks([r["batch"] for r in sel], [str(r["batch"]) for r in sel], minor=False)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"ms per layer ({q} new tokens / sequence)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"ragged attention on {payload['provenance']['device']}", fontsize=10)
    return save_plot(fig, path)


def main(argv=None):
    parser = Parser(prog="python -m minibass.bench attention", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=positive_int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--new-tokens", type=positive_int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--spreads", type=spread, nargs="+", default=[0.0, 0.5, 0.95],
                        help="how ragged the cache lengths are, each in [0, 1): 0 all equal (default 0 0.5 0.95)")
    parser.add_argument("--reps", type=positive_int, default=5,
                        help="timed calls per cell, the median reported (naive and the interpreted kernel: one)")
    parser.add_argument("--quick", action="store_true",
                        help="a few small configurations only (written under build/bench/, as any run with "
                             "options other than --device)")
    parser.add_argument("--out", default=None, help="JSON path (default: see --quick)")
    parser.add_argument("--plot", default=None)
    args = parse(parser, argv, "attention")
    kind = args.device.split(":")[0]
    out = result_path(parser, args, f"attention-{kind}.json", args.out)
    plot = result_path(parser, args, f"attention-{kind}.png", args.plot)
    if args.quick:
        sized = [f"--{name.replace('_', '-')}" for name in ("batches", "new_tokens", "spreads", "reps")
                 if getattr(args, name) != parser.get_default(name)]
        if sized:
            parser.error(f"--quick sets its own sizes; leave out {', '.join(sized)} or --quick")
        args.batches, args.new_tokens, args.spreads, args.reps = [1, 8], [4], [0.0, 0.95], 2
    run(args.device, args.batches, args.new_tokens, args.spreads, args.reps, out, plot)


def spread(text: str) -> float:
    """An argparse type: a spread of cache lengths in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value
