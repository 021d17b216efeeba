"""What ``torch.inference_mode()`` saves over ``torch.no_grad()`` in regular and speculative decoding.

    python scripts/grad_mode.py [--batch 1] [--draft-length 4] [--rounds 6]

``generate`` and ``speculative_generate`` run under ``torch.inference_mode()``, which, beyond
``no_grad``, drops autograd's version counters and view tracking from every tensor operation.
This script times both functions as shipped and the same functions under ``no_grad`` (their
undecorated bodies, ``__wrapped__``), on the demo pair, the demo's held-out prompts, 48 greedy
tokens, in batches of ``--batch``. Each round runs the four in turn (the two modes in an order
that alternates from round to round, so that a slow spell of the machine falls on both), and the
models' rotary tables are rebuilt before every run, so that every run does that work once. The
first round warms up and is dropped; each line is the median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import minibass
from minibass import zoo


def modes() -> dict:
    """{mode: (generate, speculative_generate)}: as shipped (inference mode), and under no_grad."""
    shipped = (minibass.generate, minibass.speculative_generate)
    return {"inference_mode": shipped, "no_grad": tuple(torch.no_grad()(f.__wrapped__) for f in shipped)}


def seconds(run, target, draft, batches, k: int | None) -> float:
    """Wall seconds of ``run`` over the batches: regular decoding if ``k`` is None, else speculative with k."""
    greedy = minibass.SamplingParams(temperature=0)
    target.rope_cache = draft.rope_cache = None  # every run builds the rotary tables once: the same work in both
    started = time.perf_counter()
    for prompts in batches:
        if k is None:
            run(target, prompts, 48, sampling=greedy)
        else:
            run(target, draft, prompts, 48, sampling=greedy, draft_length=k)
    return time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--draft-length", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    if min(args.batch, args.draft_length, args.rounds) < 1:
        raise ValueError("--batch, --draft-length and --rounds must be >= 1")
    target, draft, tokenizer = zoo.load_demo_pair()
    batches = zoo.demo_batches(tokenizer, args.batch)
    runs = modes()
    times = {(mode, kind): [] for mode in runs for kind in ("regular", "speculative")}
    for r in range(args.rounds + 1):  # the first round warms up and is dropped
        for mode in (list(runs) if r % 2 else list(runs)[::-1]):
            regular, speculative = runs[mode]
            times[mode, "regular"].append(seconds(regular, target, draft, batches, None))
            times[mode, "speculative"].append(seconds(speculative, target, draft, batches, args.draft_length))
    median = {key: statistics.median(values[1:]) for key, values in times.items()}
    print(f"batch {args.batch}, k = {args.draft_length}, {sum(map(len, batches))} held-out prompts, 48 new greedy "
          f"tokens; seconds for all the prompts, median of {args.rounds} rounds")
    print(f"{'':15}  {'regular':>8}  {'speculative':>11}  {'speed-up':>8}")
    for mode in runs:
        print(f"{mode:15}  {median[mode, 'regular']:8.3f}  {median[mode, 'speculative']:11.3f}  "
              f"{median[mode, 'regular'] / median[mode, 'speculative']:7.2f}x")
    for kind in ("regular", "speculative"):
        print(f"inference_mode / no_grad, {kind}: {median['inference_mode', kind] / median['no_grad', kind]:.3f}")


if __name__ == "__main__":
    from minibass.bench.common import run_script

    run_script(main)
