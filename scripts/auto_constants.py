"""How `auto`'s constants hold up on other prompt sets and other cost ratios, replayed without timing.

    python scripts/auto_constants.py [--pulls 2 6 10 15] [--memories 0.9] [--orders 6] [--in-steps]

``make demo`` decodes one set of prompts (the first 8 held-out ones, 16 at batch 16), so a policy
tuned on the mean over all prompts can still trail the best fixed k on the demo's own batch. This
script replays ``CostAwareDraftLength`` with each pair of constants (``pull``, ``memory``) on the
greedy agreement runs and call costs committed in ``bench_results/policies-cpu.json`` (written by
``python -m minibass.bench policies``), for

- prompt sets: the first 8 (16) held-out prompts, then the first 8 (16) of ``--orders - 1``
  shuffles of all of them (fixed seed);
- call costs: as measured, and with the extra verify cost per drafted token scaled by 0.6 and by
  1.4 (a live step of this loop measured a gentler slope than the probes; another machine can be
  steeper);

and prints, at batch 1, 4, 8 and 16, the worst and the mean over prompt sets of `auto`'s speed-up
divided by the best fixed k's (k = 1 to 6) on the same prompts and costs. With ``--in-steps`` each
cell is instead how many steps of that best k per batch `auto` takes longer, the most and the mean
over prompt sets (negative where `auto` is ahead): a call of 48 tokens at batch 8 is 20 to 31 steps
of the best fixed k (in the JSON files of 2026-12-02 and 2026-12-04), so a step there is 3–5 % of
the call. Nothing is timed: the numbers are deterministic for a given JSON file.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

from minibass.bench.policies import CallCosts, replay
from minibass.draft_length import CostAwareDraftLength

BATCH_SIZES = (1, 4, 8, 16)
FIXED = (1, 2, 3, 4, 5, 6)


def cost_models(costs_ms: dict) -> dict[str, CallCosts]:
    def scaled(factor: float) -> CallCosts:
        return CallCosts({int(b): {"regular": c["regular"] / 1e3, "draft": c["draft"] / 1e3,
                                   "verify5": (c["regular"] + factor * (c["verify5"] - c["regular"])) / 1e3}
                          for b, c in costs_ms.items()})
    return {"measured": scaled(1.0), "verify slope x0.6": scaled(0.6), "verify slope x1.4": scaled(1.4)}


def replayed(make_policy, runs, new_tokens, k_max, costs: CallCosts, batch: int) -> tuple[float, int, int]:
    """(seconds, steps, batches) of these sequences decoded in whole batches of ``batch``, with a new policy for
    every batch, as ``draft_length="auto"`` makes one per call."""
    groups = [runs[i:i + batch] for i in range(0, len(runs) - batch + 1, batch)]
    results = [replay(make_policy(), g, new_tokens, costs, k_max) for g in groups]
    return sum(r["seconds"] for r in results), sum(r["steps"] for r in results), len(groups)


def relative_speed(make_policy, runs, new_tokens, k_max, costs: CallCosts, batch: int) -> float:
    """`auto`'s speed-up over regular decoding on these sequences in batches of ``batch``, divided by the
    best fixed k's."""
    def seconds(make):
        return replayed(make, runs, new_tokens, k_max, costs, batch)[0]

    return min(seconds(lambda: k) for k in FIXED) / seconds(make_policy)


def steps_behind(make_policy, runs, new_tokens, k_max, costs: CallCosts, batch: int) -> float:
    """How much longer `auto` takes than the best fixed k on these sequences in batches of ``batch``, in steps of
    that k per batch: a call of 48 tokens is one to two dozen steps, so one step is a few percent of it."""
    best_seconds, best_steps, batches = min(
        (replayed(lambda: k, runs, new_tokens, k_max, costs, batch) for k in FIXED), key=lambda r: r[0])
    seconds = replayed(make_policy, runs, new_tokens, k_max, costs, batch)[0]
    return (seconds - best_seconds) / (best_seconds / best_steps) / batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="bench_results/policies-cpu.json")
    parser.add_argument("--pulls", type=float, nargs="+", default=[2, 6, 10, 15])
    parser.add_argument("--memories", type=float, nargs="+", default=[0.9])
    parser.add_argument("--orders", type=int, default=6, help="prompt sets: the demo's, then shuffles (default 6)")
    parser.add_argument("--in-steps", action="store_true",
                        help="how many steps of the best fixed k auto takes longer, instead of the ratio of speeds")
    args = parser.parse_args(argv)
    # A cell: the worst over prompt sets, then the mean. For a ratio of speeds the worst is the lowest; for
    # steps behind, the most.
    measure, worst_of, form = ((steps_behind, max, "{:+.2f}") if args.in_steps else (relative_speed, min, "{:.3f}"))
    for pull, memory in ((p, m) for p in args.pulls for m in args.memories):
        CostAwareDraftLength(pull=pull, memory=memory)  # a bad constant said before anything is printed
    payload = json.loads(Path(args.json).read_text())
    if not isinstance(payload, dict) or not {"runs", "new_tokens", "k_max", "provenance"} <= payload.keys():
        raise ValueError(f"{args.json} is not the JSON of `python -m minibass.bench policies` (no recorded runs)")
    runs, new_tokens, k_max = payload["runs"], payload["new_tokens"], payload["k_max"]
    if len(runs) < max(BATCH_SIZES):  # each prompt set must fill a whole batch at every batch size
        parser.error(f"{args.json} holds {len(runs)} sequences; batches of {max(BATCH_SIZES)} need at least "
                     f"{max(BATCH_SIZES)} (a policies run over more prompts or batch sizes records more)")
    rng = random.Random(0)
    orders = [list(range(len(runs)))] + [rng.sample(range(len(runs)), len(runs)) for _ in range(args.orders - 1)]
    print(f"{args.json} ({payload['provenance']['date']}): {len(runs)} sequences, {new_tokens} tokens; "
          f"{'steps of the best fixed k that auto takes longer' if args.in_steps else 'auto / best fixed k'}, "
          f"worst and mean over {len(orders)} prompt sets (the first: the demo's)")
    models = cost_models(payload["costs_ms"])
    print(f"{'pull':>5} {'memory':>6}  {'costs':<18} " + "  ".join(f"{'batch ' + str(b):>13}" for b in BATCH_SIZES)
          + "  worst")
    for pull in args.pulls:
        for memory in args.memories:
            def make_policy():
                return CostAwareDraftLength(pull=pull, memory=memory)
            worst = []
            for name, costs in models.items():
                cells = []
                for batch in BATCH_SIZES:
                    size = 16 if batch == 16 else 8
                    values = [measure(make_policy, [runs[i] for i in order[:size]], new_tokens, k_max, costs, batch)
                              for order in orders]
                    worst.append(worst_of(values))
                    cells.append(f"{form.format(worst_of(values))}/{form.format(statistics.mean(values))}")
                print(f"{pull:>5g} {memory:>6g}  {name:<18} " + "  ".join(f"{c:>13}" for c in cells))
            print(f"{'':>5} {'':>6}  {'':<18} {'':>60}  {form.format(worst_of(worst))}")


if __name__ == "__main__":
    from minibass.bench.common import run_script

    run_script(main)
