"""Regular batched decoding vs batched speculative decoding, per backend and draft length.

    python -m minibass.bench speculative [--device cpu] [--batch-sizes 1 2 4 8 16]

One process, one run: for each batch size, each attention backend and each draft length (fixed
1, 2 and 4, BASS's dynamic policy and the cost-aware ``auto``), ``speculative_generate`` and a
regular ``generate`` on the target, timed in turn. Reports tokens/s, speed-up over regular
decoding (the median of the per-round ratios), acceptance rate, mean tokens per target call,
target calls, the draft / verify / accept time split, and the share of the time spent outside
the models' forward calls (accept, roll back, bookkeeping).

The pair: the shipped demo pair with held-out code prompts when ``minibass.zoo`` has one, else
two random Llama models on random prompts (target 4 layers x 256, draft 1 layer x 128). With
random weights the acceptance rate says nothing about real models — the output says so.
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import nullcontext

import torch

import minibass
from minibass.draft_length import parse_draft_length
from .common import (Parser, forward_clock, parse, positive_int, provenance, pyplot, random_llama, rate_text,
                     result_path, save_plot, timed, write_json)


def load_pair(device, dtype):
    """(target, draft, description, prompt maker): the demo pair with held-out code prompts, else random."""
    try:
        from minibass import zoo
        target, draft, tokenizer = zoo.load_demo_pair(dtype=dtype, device=device)
        texts = zoo.demo_prompts(16)
        held_out = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
        return target, draft, "the shipped demo pair, held-out code prompts", lambda b: (held_out * b)[:b]
    except (ImportError, AttributeError, FileNotFoundError):
        pass
    with tempfile.TemporaryDirectory() as folder:
        target = minibass.load_model(random_llama(f"{folder}/t", layers=4, hidden=256, seed=0), dtype=dtype,
                                     device=device)
        draft = minibass.load_model(random_llama(f"{folder}/d", layers=1, hidden=128, heads=4, kv_heads=2, seed=1),
                                    dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(0)

    def random_prompts(batch):
        return [torch.randint(0, target.vocab_size, (8 + (5 * b) % 17,), generator=gen).tolist() for b in range(batch)]

    return target, draft, "random Llama pair (target 4x256, draft 1x128): acceptance is meaningless", random_prompts


def run(device, batch_sizes, draft_lengths, backends, new_tokens, temperature, out, plot, reps=3):
    dtype = torch.float32
    on_gpu = device.startswith("cuda")
    target, draft, pair, make_prompts = load_pair(device, dtype)
    print(f"pair: {pair}")
    sampling = minibass.SamplingParams(temperature=temperature)
    rows = []
    payload = {"provenance": provenance(device), "pair": pair, "new_tokens": new_tokens,
               "temperature": temperature, "reps": reps,
               "timing": "median of reps after a warm-up; each cell's speed-up against regular runs timed in turn with it",
               "rows": rows}
    for batch in batch_sizes:
        prompts = make_prompts(batch)
        regular = lambda: minibass.generate(target, prompts, new_tokens, sampling=sampling, seed=0,  # noqa: E731
                                            attention="padded")
        regular()  # warm-up
        row = {"batch": batch, "runs": []}
        regular_seconds = []
        for backend in backends:
            for k in draft_lengths:
                call = lambda: minibass.speculative_generate(target, draft, prompts, new_tokens,  # noqa: E731
                                                             sampling=sampling, draft_length=k, seed=0,
                                                             attention=backend)
                runs, bases = [], []
                for _ in range(reps):  # regular and speculative in turn: a slow spell hits both alike
                    base_elapsed, base = timed(regular, device=device)
                    bases.append(base_elapsed)
                    # The clock's synchronisations would slow a GPU run: there it runs bare.
                    clock = nullcontext({"seconds": None}) if on_gpu else forward_clock(target, draft, device=device)
                    with clock as spent:
                        elapsed, result = timed(call, device=device)
                    runs.append((elapsed, spent["seconds"], result))
                regular_seconds += bases
                ratios = sorted(b / r[0] for b, r in zip(bases, runs))  # regular seconds / speculative seconds
                seconds, forward_seconds, result = sorted(runs, key=lambda r: r[0])[len(runs) // 2]  # the median run
                s = result.stats
                if on_gpu:  # the share inside forward calls, from one more run with the clock on
                    with forward_clock(target, draft, device=device) as spent:
                        clocked_seconds, _ = timed(call, device=device)
                    forward_share = spent["seconds"] / clocked_seconds
                else:
                    forward_share = forward_seconds / seconds
                row["runs"].append({
                    "backend": backend, "draft_length": k, "tok_s": s.new_tokens / seconds,
                    "speedup": ratios[len(ratios) // 2], "acceptance_rate": s.acceptance_rate,
                    "regular_tok_s": base.stats.new_tokens / sorted(bases)[len(bases) // 2],
                    "tokens_per_target_call": s.tokens_per_target_call, "target_calls": s.target_calls,
                    "mean_accepted_per_step": s.mean_accepted,
                    "mean_draft_length": sum(s.draft_lengths) / max(1, len(s.draft_lengths)),
                    "time_split_s": s.time_split,
                    "outside_forward_share": 1.0 - forward_share,
                })
                r = row["runs"][-1]
                print(f"B={batch:<2} {backend:<6} k={str(k):<7} {r['tok_s']:7.1f} tok/s  x{r['speedup']:.2f}  "
                      f"accept {rate_text(r['acceptance_rate'])}  "
                      f"accepted/step {r['mean_accepted_per_step']:.2f}  "
                      f"tok/call {r['tokens_per_target_call']:.2f}  outside forward {r['outside_forward_share']:.0%}",
                      flush=True)
        row["regular_tok_s"] = batch * new_tokens / sorted(regular_seconds)[len(regular_seconds) // 2]
        print(f"B={batch:<2} regular        {row['regular_tok_s']:7.1f} tok/s", flush=True)
        rows.append(row)
        write_json(out, payload)  # after every batch size: a run stopped early keeps what it measured
    print(f"wrote {out}")
    if plot:
        print(f"wrote {make_plot(payload, plot)}")


def predicted_speedup(row: dict, run: dict) -> float | None:
    """The cost model's speed-up for one measured run (``minibass.costmodel.speedup_from_costs``), per sequence:
    costs from the run's own time split (a step outside the draft phase, a draft call), a regular step from
    the regular run, acceptance from the mean accepted prefix. None for policies without one fixed k."""
    from ..costmodel import alpha_from_accepted, speedup_from_costs

    k, steps = run["draft_length"], run["target_calls"] - 1  # the first target call is the prefill
    if not isinstance(k, int) or steps < 1 or not run["mean_draft_length"]:
        return None
    split = run["time_split_s"]
    verify = (split["verify"] + split.get("accept", 0.0) + split.get("rollback", 0.0)) / steps
    draft = split["draft"] / (run["mean_draft_length"] * steps)
    regular_tok_s = run.get("regular_tok_s", row["regular_tok_s"])  # the regular runs timed with this cell
    return speedup_from_costs(row["batch"] / regular_tok_s, verify, draft, k=k,
                              alpha=alpha_from_accepted(min(run["mean_accepted_per_step"], k), k))


def make_plot(payload, path):
    plt = pyplot()

    rows = payload["rows"]
    backends = sorted({r["backend"] for r in rows[0]["runs"]})
    fig, axes = plt.subplots(1, len(backends), figsize=(4.5 * len(backends), 3.6), sharey=True, squeeze=False)
    for ax, backend in zip(axes[0], backends):
        for k in dict.fromkeys(r["draft_length"] for r in rows[0]["runs"]):
            pts = [(row["batch"], run["speedup"]) for row in rows for run in row["runs"]
                   if run["backend"] == backend and run["draft_length"] == k]
            line, = ax.plot(*zip(*pts), "o-", label=f"k={k}")
            predicted = [(row["batch"], predicted_speedup(row, run)) for row in rows for run in row["runs"]
                         if run["backend"] == backend and run["draft_length"] == k]
            predicted = [(b, x) for b, x in predicted if x is not None]
            if predicted:
                ax.plot(*zip(*predicted), "x:", color=line.get_color(), alpha=0.7, label=f"k={k}, cost model")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set(title=backend, xlabel="batch size", xscale="log")
        ax.set_xticks([r["batch"] for r in rows], [str(r["batch"]) for r in rows])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("speed-up over regular decoding")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"{payload['pair']} on {payload['provenance']['device']}", fontsize=9)
    return save_plot(fig, path)


def main(argv=None):
    parser = Parser(prog="python -m minibass.bench speculative", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--draft-lengths", nargs="+", default=["1", "2", "4", "dynamic", "auto"])
    parser.add_argument("--backends", nargs="+", default=None, choices=sorted(minibass.BACKENDS),
                        help="default: all but ragged on the CPU (interpreted there)")
    parser.add_argument("--new-tokens", type=positive_int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--reps", type=positive_int, default=3, help="timed runs per cell (the median is reported)")
    parser.add_argument("--out", default=None, help="JSON path (default: bench_results/ for the documented run, "
                                                    "build/bench/ for one with other options)")
    parser.add_argument("--plot", default=None)
    args = parse(parser, argv, "speculative")
    kind = args.device.split(":")[0]
    backends = args.backends or [b for b in minibass.BACKENDS if kind != "cpu" or b != "ragged"]
    try:
        minibass.SamplingParams(temperature=args.temperature)
        draft_lengths = [parse_draft_length(k) for k in args.draft_lengths]
    except ValueError as error:
        parser.error(str(error))
    run(args.device, args.batch_sizes, draft_lengths, backends, args.new_tokens, args.temperature,
        result_path(parser, args, f"speculative-{kind}.json", args.out),
        result_path(parser, args, f"speculative-{kind}.png", args.plot), args.reps)
