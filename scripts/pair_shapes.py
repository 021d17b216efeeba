"""Measures what a target/draft pair of given shapes would cost in minibass, before training it.

    python scripts/pair_shapes.py [--batch 8] [--context 64] [--k 4]

For random Llama models of each candidate shape (vocab 4096, as the demo pair), with the
default attention backend: the time of a target decode step (1 token per sequence), of a
verify step (k + 1 tokens per sequence), and of a draft call, at a given batch size over a
cache of ``--context`` tokens, each the median of repeated calls after a warm-up. Prints the
draft / target-step ratio, and the speed-up speculative decoding would reach at per-token
acceptance alpha (expected tokens per step (1 - alpha^(k+1)) / (1 - alpha), divided by the
step cost in target decode steps).
"""

from __future__ import annotations

import argparse
import tempfile

import minibass
from minibass.bench.common import call_ms, probability, random_llama, run_script
from minibass.draft_length import expected_tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--alpha", type=probability, default=0.76, help="per-token acceptance for the prediction")
    parser.add_argument("--targets", nargs="+", default=["4x256", "8x256", "12x256", "8x320", "12x320"],
                        help="LAYERSxHIDDEN")
    parser.add_argument("--drafts", nargs="+", default=["2x128", "1x192", "1x128", "1x96"])
    args = parser.parse_args(argv)
    for option, value in (("--batch", args.batch), ("--context", args.context), ("--k", args.k)):
        if value < 1:
            raise ValueError(f"{option} must be >= 1, got {value}")
    for spec in args.targets + args.drafts:
        layers, _, hidden = spec.partition("x")
        if not (layers.isdecimal() and hidden.isdecimal() and int(layers) >= 1 and int(hidden) >= 64
                and int(hidden) % max(2, int(hidden) // 32) == 0):
            raise ValueError(f"a shape is LAYERSxHIDDEN, layers >= 1 and hidden >= 64 split evenly into "
                             f"max(2, hidden // 32) heads (e.g. 12x256), got {spec!r}")
    shapes = {}
    with tempfile.TemporaryDirectory() as folder:
        for spec in dict.fromkeys(args.targets + args.drafts):
            layers, hidden = map(int, spec.split("x"))
            heads = max(2, hidden // 32)
            path = random_llama(f"{folder}/{spec}", layers=layers, hidden=hidden, heads=heads, kv_heads=max(1, heads // 2))
            model = minibass.load_model(path)
            params = sum(p.numel() for p in model.parameters())
            shapes[spec] = (model, params)
    k, alpha = args.k, args.alpha
    tokens_per_step = expected_tokens(alpha, k)  # k + 1 at alpha = 1
    drafts = {d: call_ms(shapes[d][0], args.batch, args.context, 1) for d in args.drafts}
    print(f"batch {args.batch}, context {args.context}, k = {k}, alpha = {alpha} "
          f"({tokens_per_step:.2f} expected tokens per step); times are medians in ms")
    for t in args.targets:
        model, params = shapes[t]
        decode, verify = call_ms(model, args.batch, args.context, 1), call_ms(model, args.batch, args.context, k + 1)
        for d, draft_ms in drafts.items():
            step = verify + k * draft_ms
            print(f"target {t} ({params / 1e6:.1f} M): decode {decode:.2f}, verify {verify:.2f} ({verify / decode:.2f}x)"
                  f" | draft {d} ({shapes[d][1] / 1e6:.2f} M): {draft_ms:.2f} = {draft_ms / decode:.3f} of a decode step"
                  f" | predicted speed-up {tokens_per_step * decode / step:.2f}x")


if __name__ == "__main__":
    run_script(main)
