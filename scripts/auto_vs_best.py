"""`auto` against the best fixed draft length, with the best one chosen on other rounds than it is measured on.

    python scripts/auto_vs_best.py --batch-size 8 [--rounds 12] [--out auto_vs_best-b8.json]

``make demo`` reports "`auto` ÷ best": `auto`'s median speed-up over the largest of the fixed lengths'
medians, all from the same few rounds. On a noisy machine that largest median is biased upwards: of
four lengths whose true speed-ups are close, the one whose rounds happened to run fast wins (the
winner's curse), so the ratio reads low even for a policy exactly as fast as the best length. This
script times the demo's methods on the demo's prompts (the shipped pair, greedy, 48 new tokens, batches
of ``--batch-size``) for ``--rounds`` rounds: regular decoding first, then k = 1, 2, 3, 4 and `auto` in an
order rotated each round. Each speculative run's speed-up is taken against the regular run of its
round. It prints, per method, the median speed-up, and `auto` ÷ best two ways:

- *in hindsight*: as the demo does, the best fixed k chosen and measured on all rounds;
- *held out*: the best k chosen on the odd-numbered rounds (1, 3, 5, ...) and `auto` ÷ that k measured
  on the even-numbered ones, and the other way round. Neither half's noise can favour the k it measures.

The per-round times go to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import minibass
from minibass import zoo

FIXED = [1, 2, 3, 4]


def time_rounds(batch: int, rounds: int, tokens: int = 48) -> dict[str, list[float]]:
    """{method: seconds of each round}, methods "regular", "1" .. "4", "auto"."""
    target, draft, tokenizer = zoo.load_demo_pair()
    groups = zoo.demo_batches(tokenizer, batch)  # the demo's own prompts and batches
    prompts = [p for group in groups for p in group]
    greedy = minibass.SamplingParams(temperature=0)
    minibass.generate(target, prompts[:1], 2)  # warm-up
    minibass.speculative_generate(target, draft, prompts[:1], 4, draft_length=4)
    speculative = FIXED + ["auto"]
    seconds: dict[str, list[float]] = {"regular": [], **{str(m): [] for m in speculative}}
    for r in range(rounds):
        for policy in [None] + [speculative[(i + r) % len(speculative)] for i in range(len(speculative))]:
            started = time.perf_counter()
            for group in groups:
                if policy is None:
                    minibass.generate(target, group, tokens, sampling=greedy)
                else:
                    minibass.speculative_generate(target, draft, group, tokens, sampling=greedy, draft_length=policy)
            seconds["regular" if policy is None else str(policy)].append(time.perf_counter() - started)
        print(f"round {r + 1} of {rounds}: " + ", ".join(f"{m} {s[-1]:.3f} s" for m, s in seconds.items()), flush=True)
    return seconds


def compare(seconds: dict[str, list[float]]) -> dict:
    """Median speed-ups, and `auto` ÷ best in hindsight and held out (see the module's docstring)."""
    rounds = range(len(seconds["regular"]))
    speedup = {m: [seconds["regular"][r] / s[r] for r in rounds] for m, s in seconds.items() if m != "regular"}

    def median(method, subset=rounds):
        return statistics.median(speedup[method][r] for r in subset)

    def best(subset=rounds):
        return max(map(str, FIXED), key=lambda k: median(k, subset))

    def auto_over_best(chosen, measured):
        k = best(chosen)
        return k, median("auto", measured) / median(k, measured)

    even, odd = [r for r in rounds if r % 2 == 0], [r for r in rounds if r % 2]
    return {"median_speedup": {m: median(m) for m in speedup},
            "hindsight": auto_over_best(rounds, rounds),
            "held_out": [auto_over_best(even, odd), auto_over_best(odd, even)]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=12, help="an even number: half choose, half measure")
    parser.add_argument("--out", default=None, help="JSON file for the per-round times (default: none)")
    args = parser.parse_args(argv)
    if args.rounds < 2 or args.rounds % 2 or args.batch_size < 1:
        parser.error(f"--rounds must be even and >= 2, --batch-size >= 1; got {args.rounds} and {args.batch_size}")
    seconds = time_rounds(args.batch_size, args.rounds)
    result = compare(seconds)
    print(f"batch {args.batch_size}, {args.rounds} rounds; median speed-up: "
          + ", ".join(f"{m} {v:.2f}x" for m, v in result["median_speedup"].items()))
    k, ratio = result["hindsight"]
    print(f"auto / best in hindsight (k = {k}, all rounds): {ratio:.3f}")
    halves = ("odd-numbered", "even-numbered")  # rounds 1, 3, ... and 2, 4, ...: 0-based even and odd
    print("auto / best held out: " + ", ".join(f"{r:.3f} (k = {k} chosen on the {half} rounds)"
                                               for (k, r), half in zip(result["held_out"], halves)))
    if args.out:
        from minibass.bench.common import provenance

        command = f"python scripts/auto_vs_best.py --batch-size {args.batch_size} --rounds {args.rounds}"
        with open(args.out, "w") as f:
            json.dump({"provenance": {**provenance("cpu"), "command": command}, "batch": args.batch_size,
                       "rounds": args.rounds, "seconds": seconds, **result}, f, indent=1)


if __name__ == "__main__":
    main()
