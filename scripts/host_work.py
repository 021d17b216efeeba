"""What the speculative loop's own host work costs per step: alone, and between real forward calls.

    python scripts/host_work.py [--batch 1] [--draft-length 4] [--touch-mb 0 4 40] [--rounds 5]

The demo's reading counts as host work what a step spends outside the two models' forward calls:
choosing the draft lengths, packing the tokens, the greedy picks, the rejection step, roll-back and
bookkeeping. This script measures that work per step with the same loop (``speculative_generate``,
greedy, the default CPU backend, the demo's held-out prompts and 48 new tokens) and the same
accounting (a run's wall time less the time inside forward calls, over its steps), for:

- stand-in models whose forward returns fixed logits at once (target and draft alike, so every
  draft is accepted and every step proposes ``--draft-length`` tokens): the loop's work on its own;
- the same stand-ins, each call first reading ``--touch-mb`` MB of weights (one matrix-vector
  product, timed as part of the call), as a real forward call does: its passage through the CPU's
  caches evicts the loop's data and code, and what the loop pays for that shows here;
- the demo pair (a 39 MB float32 target, a 4.8 MB draft), and its regular step for scale.

Every configuration runs once per round, in turn, so that a slow spell of the machine falls on all
of them; each row is the median over ``--rounds``.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import minibass
from minibass import zoo
from minibass.bench.common import forward_clock
from minibass.cache import KVCache


class StandIn:
    """A ``CausalLM`` with no layers: the logits of a token are a fixed random row, so the greedy
    continuation of every token is fixed; each call first reads ``touch_mb`` MB of weights."""

    max_seq_len = 1 << 20

    def __init__(self, vocab_size: int, touch_mb: float):
        self.vocab_size = vocab_size
        self.rows = torch.randn(64, vocab_size, generator=torch.Generator().manual_seed(0))  # (64, V)
        self.weights = torch.randn(max(1, int(touch_mb * 2**20 / 4 / 256)), 256)  # float32, touch_mb MB

    def init_cache(self, batch_size: int, capacity: int) -> KVCache:
        return KVCache(0, batch_size, 1, capacity, 1)  # no layers: only the lengths

    def forward(self, tokens, q_lens, cache, *, attention=None):
        self.weights.mv(torch.ones(256))  # streams the weights through the caches, as a layer's matmuls do
        cache.lengths = cache.lengths + torch.as_tensor(q_lens)
        return self.rows[torch.as_tensor(tokens) % len(self.rows)]  # (N, V)


def host_us_per_step(target, draft, batches, k) -> float:
    """Microseconds per step outside both models' forward calls, over the demo's batches."""
    host, steps = 0.0, 0
    greedy = minibass.SamplingParams(temperature=0)
    with forward_clock(target, draft, device="cpu") as inside:
        for prompts in batches:
            result = minibass.speculative_generate(target, draft, prompts, 48, sampling=greedy, draft_length=k)
            host += result.stats.wall_time
            steps += result.stats.steps
    return 1e6 * (host - inside["seconds"]) / steps


def regular_ms_per_step(target, batches) -> float:
    wall, steps = 0.0, 0
    for prompts in batches:
        result = minibass.generate(target, prompts, 48, sampling=minibass.SamplingParams(temperature=0))
        wall, steps = wall + result.stats.wall_time, steps + result.stats.steps
    return 1e3 * wall / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--draft-length", type=int, default=4)
    parser.add_argument("--touch-mb", type=float, nargs="+", default=[0, 4, 40],
                        help="MB of weights each stand-in call reads (0: none)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.draft_length < 1 or args.rounds < 1 or min(args.touch_mb) < 0:
        raise ValueError("--batch, --draft-length and --rounds must be >= 1, --touch-mb >= 0")
    target, draft, tokenizer = zoo.load_demo_pair()
    batches = zoo.demo_batches(tokenizer, args.batch)
    pairs = {f"stand-ins, {mb:g} MB read per call": (StandIn(target.vocab_size, mb), StandIn(target.vocab_size, mb))
             for mb in args.touch_mb}
    pairs["the demo pair"] = (target, draft)
    times = {name: [] for name in pairs}
    regular = []
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for name, (t, d) in pairs.items():
            times[name].append(host_us_per_step(t, d, batches, args.draft_length))
        regular.append(regular_ms_per_step(target, batches))
    step_ms = statistics.median(regular[1:])
    print(f"batch {args.batch}, k = {args.draft_length}, {sum(map(len, batches))} held-out prompts, 48 new greedy "
          f"tokens, {torch.get_num_threads()} threads; median of {args.rounds} rounds; the demo pair's regular "
          f"step (prefill included): {step_ms:.2f} ms")
    print(f"{'':36}  {'host work per step':>18}  {'in regular steps':>16}")
    for name, values in times.items():
        us = statistics.median(values[1:])
        print(f"{name:36}  {us:15.0f} us  {us / 1e3 / step_ms:16.3f}")


if __name__ == "__main__":
    main()
