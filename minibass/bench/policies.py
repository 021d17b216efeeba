"""Draft-length policies compared without timing noise: greedy runs replayed with measured call costs.

    python -m minibass.bench policies [--batch-sizes 1 4 8 16] [--new-tokens 48]

Under greedy decoding a draft token is accepted exactly when it equals the target's own greedy
token, so what a step accepts depends only on where the sequence is, not on how it got there:
at position i, a draft of k tokens keeps min(run_i, k) of them, where run_i is how many greedy
tokens of the draft, continuing from the target's text, agree with the target's next ones.
This benchmark

1. records run_i at every position of the target's greedy output for each held-out demo prompt
   (one batched ``generate`` of the draft per prompt, over all positions at once), with
   ``--k-max`` the longest run it looks for;
2. measures, once, the forward calls the loop makes at each batch size: a regular step, a draft
   call, and a verify of 1 and of 5 tokens per sequence (a line in between and beyond), the same
   kind of probes as ``make demo`` (each a median of 7 calls; 5 rounds; the draft and verify as
   ratios to the regular step of the same round);
3. replays the loop for every policy, exactly as ``speculative_generate`` steps it (the same
   budget cap, the same ``update`` and ``observe_costs`` calls, the batch shrinking as
   sequences finish), adding up the measured call costs instead of timing anything, over
   consecutive groups of prompts of each batch size (the prompts left over after the last whole
   group are not used at that size).

So every policy is priced with the same costs and sees the same sequences: the differences
between policies are the policies', not the machine's mood. What it leaves out, and ``make demo``
includes: sampling, the rejection step and roll-back outside the forward calls (``make demo``
shows how far the two differ). Greedy only: under sampling, what a step accepts is random.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import minibass
from minibass.draft_length import (BassDynamicDraftLength, CostAwareDraftLength, FixedDraftLength,
                                   PerSequenceDynamicDraftLength, make_policy, parse_draft_length)
from minibass.generate import IDLE
from .common import (Parser, call_costs, parse, positive_int, probability, provenance, pyplot, result_path,
                     save_plot, write_json)


def agreement_runs(target, draft, prompts: list[list[int]], new_tokens: int, k_max: int) -> list[list[int]]:
    """runs[b][i]: how many of the draft's greedy tokens after prompt b + the target's first i greedy
    tokens equal the target's next greedy tokens (at most ``k_max``), for i < ``new_tokens``."""
    greedy = minibass.SamplingParams(temperature=0)
    outputs = minibass.generate(target, prompts, new_tokens + k_max, sampling=greedy).tokens
    runs = []
    for prompt, out in zip(prompts, outputs):
        guesses = minibass.generate(draft, [prompt + out[:i] for i in range(new_tokens)], k_max,
                                    sampling=greedy).tokens
        run = []
        for i, guess in enumerate(guesses):
            n = 0
            while n < k_max and guess[n] == out[i + n]:
                n += 1
            run.append(n)
        runs.append(run)
    return runs


class CallCosts:
    """Seconds per forward call at any batch size, from probes at a few: a regular step, a draft call
    and a verify whose cost is a line in the tokens per sequence through the probes of 1 and 5."""

    def __init__(self, probes: dict[int, dict[str, float]]):
        self.probes = dict(sorted(probes.items()))  # batch -> {"regular", "draft", "verify5"} in seconds

    def _at(self, batch: int, key: str) -> float:
        sizes = list(self.probes)
        if batch <= sizes[0]:
            return self.probes[sizes[0]][key]
        for lo, hi in zip(sizes, sizes[1:]):
            if batch <= hi:
                w = (batch - lo) / (hi - lo)
                return (1 - w) * self.probes[lo][key] + w * self.probes[hi][key]
        return self.probes[sizes[-1]][key] * batch / sizes[-1]  # beyond the probes: grows with the batch

    def regular(self, batch: int) -> float:
        return self._at(batch, "regular")

    def draft(self, batch: int) -> float:
        return self._at(batch, "draft")

    def verify(self, batch: int, k: int) -> float:
        one = self.regular(batch)
        return one + k * (self._at(batch, "verify5") - one) / 4


def measure_costs(target, draft, batch_sizes, context: int = 48, rounds: int = 5) -> CallCosts:
    """The probes of ``make demo`` (``common.call_costs``, with a verify of 5 tokens) at each batch size,
    in seconds."""
    probes = {}
    for batch in batch_sizes:
        ms = call_costs(target, draft, batch, 5, context=context, rounds=rounds)
        probes[batch] = {"regular": ms["regular"] / 1e3, "draft": ms["draft"] / 1e3, "verify5": ms["verify"] / 1e3}
    return CallCosts(probes)


def replay(policy, runs: list[list[int]], new_tokens: int, costs: CallCosts, k_max: int) -> dict:
    """The loop of ``speculative_generate`` for greedy decoding, on agreement runs recorded up to ``k_max``.

    Returns seconds (the sum of the call costs), steps, the draft length of each step and what each
    sequence accepted at each step (-1: finished), as ``GenerationStats`` records them."""
    policy = make_policy(policy)
    if hasattr(policy, "start"):
        policy.start(len(runs))
    emitted = [0] * len(runs)
    seconds, lengths, accepted_rows = 0.0, [], []
    while True:
        active = [b for b, n in enumerate(emitted) if n < new_tokens]
        if not active:
            break
        asked = policy.lengths(active)
        proposed = [min(k, new_tokens - 1 - emitted[b]) for k, b in zip(asked, active)]  # the loop's budget cap
        if max(proposed) > k_max:
            raise ValueError(f"a draft of {max(proposed)} tokens, longer than the runs recorded (k_max {k_max})")
        accepted = [min(runs[b][emitted[b]], k) for b, k in zip(active, proposed)]
        k = max(proposed)
        draft_s, verify_s = k * costs.draft(len(active)), costs.verify(len(active), k)
        seconds += draft_s + verify_s
        lengths.append(k)
        row = [IDLE] * len(runs)  # finished sequences are idle, as in GenerationStats.accepted
        for b, n in zip(active, accepted):
            row[b] = n
        accepted_rows.append(row)
        drafted = [i for i, p in enumerate(proposed) if p > 0]
        if drafted:
            policy.update([active[i] for i in drafted], [proposed[i] for i in drafted],
                          [accepted[i] for i in drafted])
        if hasattr(policy, "observe_costs"):
            policy.observe_costs(k, draft_s, verify_s)
        for b, n in zip(active, accepted):
            emitted[b] += n + 1
    return {"seconds": seconds, "steps": len(lengths), "draft_lengths": lengths, "accepted": accepted_rows}


def compare(runs, new_tokens, costs: CallCosts, policies, batch_sizes, k_max: int) -> list[dict]:
    """For each batch size, each policy's mean speed-up over regular decoding across consecutive groups."""
    rows = []
    for batch in batch_sizes:
        groups = [runs[i:i + batch] for i in range(0, len(runs) - batch + 1, batch)]
        regular = new_tokens * costs.regular(batch)  # every sequence takes new_tokens steps
        row = {"batch": batch, "groups": len(groups), "speedup": {}, "mean_draft_length": {}}
        for policy in policies:
            results = [replay(policy, g, new_tokens, costs, k_max) for g in groups]
            row["speedup"][str(policy)] = statistics.mean(regular / r["seconds"] for r in results)
            row["mean_draft_length"][str(policy)] = statistics.mean(
                statistics.mean(r["draft_lengths"]) for r in results)
        rows.append(row)
    return rows


# Made-up call costs shaped like a large model on a GPU, where a decode step is memory-bound: a verify
# of a few tokens costs about one step and a draft call a twentieth of one (in regular steps).
GPU_LIKE = {1: {"regular": 1.0, "draft": 0.05, "verify5": 1.05}, 16: {"regular": 1.1, "draft": 0.06, "verify5": 1.2}}


def iid_runs(alpha: float, sequences: int, new_tokens: int, k_max: int, seed: int = 0) -> list[list[int]]:
    """Made-up agreement runs: every draft token accepted independently with probability alpha."""
    gen = torch.Generator().manual_seed(seed)
    accepted = torch.rand(sequences, new_tokens, k_max, generator=gen) < alpha  # (S, N, k_max)
    return accepted.long().cumprod(-1).sum(-1).tolist()  # the run: accepted tokens before the first rejection


def longest_draft(draft_length) -> int | None:
    """The most tokens a draft-length policy can ask for in one step; None for a policy object it does not know
    (the replay then refuses a draft longer than the runs recorded when it comes)."""
    policy = make_policy(draft_length)
    if isinstance(policy, FixedDraftLength):
        return policy.k
    if isinstance(policy, PerSequenceDynamicDraftLength):
        return BassDynamicDraftLength.l_limit  # each sequence's Algorithm 1 at its defaults
    if isinstance(policy, BassDynamicDraftLength):
        return policy.l_limit
    if isinstance(policy, CostAwareDraftLength):
        return policy.k_max
    return None


def run(batch_sizes, policies, new_tokens, k_max, out, plot, iid=None, gpu_like=False):
    from minibass import zoo

    if any(isinstance(p, int) and p > k_max for p in policies):
        raise ValueError(f"fixed draft lengths up to --k-max {k_max}, got {policies}")
    longest = {str(p): longest_draft(p) for p in policies if not isinstance(p, int)}
    too_long = {name: k for name, k in longest.items() if k is not None and k > k_max}
    if too_long:  # said now, not when the replay first asks for more than the runs recorded
        raise ValueError(f"--k-max {k_max} records runs of up to {k_max} tokens, but "
                         + ", ".join(f"{name!r} may draft {k}" for name, k in too_long.items())
                         + f": give --k-max {max(too_long.values())} or more")
    target, draft, tokenizer = zoo.load_demo_pair()
    if iid is None:
        prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(1000)]
        if max(batch_sizes) > len(prompts):
            raise ValueError(f"batch sizes up to {len(prompts)} (the held-out prompts shipped), "
                             f"got {max(batch_sizes)}")
        print(f"recording greedy agreement runs for {len(prompts)} held-out prompts ...", flush=True)
        runs, source = agreement_runs(target, draft, prompts, new_tokens, k_max), "the shipped demo pair, held-out code prompts"
    else:
        runs, source = iid_runs(iid, 2 * max(batch_sizes), new_tokens, k_max), f"made-up i.i.d. runs, alpha {iid}"
    if gpu_like:
        costs, priced = CallCosts(GPU_LIKE), "made-up GPU-like call costs"
    else:
        print("measuring call costs ...", flush=True)
        costs, priced = measure_costs(target, draft, sorted(set(batch_sizes) | {1})), "call costs measured once"
    for batch, c in costs.probes.items():
        print(f"  batch {batch:<2}: regular {1e3 * c['regular']:.2f} ms, draft {c['draft'] / c['regular']:.2f}, "
              f"verify of 5 {c['verify5'] / c['regular']:.2f} regular steps")
    rows = compare(runs, new_tokens, costs, policies, batch_sizes, k_max)
    names = [str(p) for p in policies]
    print(f"\nspeed-up over regular decoding (forward calls only), {source}, {priced}, mean over groups")
    print("batch  groups  " + "  ".join(f"{('k=' + n) if n.isdigit() else n:>8}" for n in names))
    for row in rows:
        print(f"{row['batch']:<5}  {row['groups']:<6}  " + "  ".join(f"{row['speedup'][n]:7.2f}x" for n in names))
    payload = {"provenance": provenance("cpu"), "pair": source, "costs": priced,
               "new_tokens": new_tokens, "k_max": k_max, "sequences": len(runs),
               "costs_ms": {b: {k: 1e3 * v for k, v in c.items()} for b, c in costs.probes.items()},
               "timing": "none: call costs measured once (5 rounds of 7 calls, ratios per round), then added up"
                         if not gpu_like else "none: made-up costs", "runs": runs, "rows": rows}
    if out:
        print(f"wrote {write_json(out, payload)}")
    if plot:
        print(f"wrote {make_plot(payload, plot)}")
    return payload


def make_plot(payload, path):
    plt = pyplot()
    rows = payload["rows"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in rows[0]["speedup"]:
        style = "o-" if name in ("auto", "dynamic") else "o:"
        ax.plot([r["batch"] for r in rows], [r["speedup"][name] for r in rows], style,
                label=f"k={name}" if name.isdigit() else name, lw=2 if name == "auto" else 1)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xlabel="batch size", ylabel="speed-up over regular decoding", xscale="log",
           title="greedy runs replayed, priced with call costs measured once")
    ax.set_xticks([r["batch"] for r in rows], [str(r["batch"]) for r in rows])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.suptitle(f"{payload['pair']} on {payload['provenance']['device']}", fontsize=9)
    return save_plot(fig, path)


def main(argv=None):
    parser = Parser(prog="python -m minibass.bench policies", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--draft-lengths", nargs="+", default=["1", "2", "3", "4", "6", "dynamic", "auto"])
    parser.add_argument("--new-tokens", type=positive_int, default=48)
    parser.add_argument("--k-max", type=positive_int, default=32, help="the longest agreement run recorded (dynamic's limit)")
    parser.add_argument("--iid", type=probability, default=None, metavar="ALPHA",
                        help="replay made-up runs (each draft token accepted with probability ALPHA) instead")
    parser.add_argument("--gpu-like", action="store_true",
                        help="price with made-up costs shaped like a memory-bound GPU step instead of measuring")
    parser.add_argument("--out", default=None, help="default: bench_results/policies-cpu.json for the documented "
                                                    "run, build/bench/ with other options, nothing for made-up runs")
    parser.add_argument("--plot", default=None, help="default: bench_results/policies-cpu.png (likewise)")
    args = parse(parser, argv, "policies")
    try:  # refuse a bad length before loading the pair and recording its runs
        draft_lengths = [parse_draft_length(p) for p in args.draft_lengths]
    except ValueError as error:
        parser.error(str(error))
    measured = args.iid is None and not args.gpu_like
    # Made-up runs write only the files named for them.
    out = result_path(parser, args, "policies-cpu.json", args.out) if measured or args.out else None
    plot = result_path(parser, args, "policies-cpu.png", args.plot) if measured or args.plot else None
    try:
        run(args.batch_sizes, draft_lengths, args.new_tokens, args.k_max,
            out, plot, iid=args.iid, gpu_like=args.gpu_like)
    except ValueError as error:
        parser.error(str(error))
