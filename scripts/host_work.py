"""What the speculative loop's own host work costs per step: alone, and between real forward calls.

    python scripts/host_work.py [--batch 1] [--draft-length 4] [--touch-mib 0 4 40] [--rounds 5] [--threads N]
                                [--temperature T]

The demo's reading counts as host work what a step spends outside the two models' forward calls:
choosing the draft lengths, packing the tokens, the greedy picks, the rejection step, roll-back and
bookkeeping. This script measures that work per step with the same loop (``speculative_generate``,
greedy, or sampled at ``--temperature`` with seed 0, the default CPU backend, the demo's held-out
prompts and 48 new tokens) and the same accounting (a run's wall time less the time inside forward
calls, over its steps), for:

- stand-in models whose forward returns fixed logits at once (target and draft alike, so every
  draft is accepted and every step proposes ``--draft-length`` tokens): the loop's work on its own;
- the same stand-ins, each call first reading ``--touch-mib`` MiB of weights (one matrix-vector
  product, timed as part of the call), as a real forward call does: what the loop's work costs after
  that has passed through the CPU's caches shows here;
- the demo pair (a 36.9 MiB float32 target, a 4.5 MiB draft), and its regular step for scale.

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
    continuation of every token is fixed; each call first reads ``touch_mib`` MiB of weights (at least
    one row of 1 KiB).

    Not ``minibass.table.TableLM``, the project's lookup-table model: its forward checks and packs its input
    and keeps a token history, and that work of its own changes what the loop's work costs after it (0.111
    and 0.114 regular steps a step "alone" as a subclass of it, against 0.093 and 0.093 with this one, two
    alternating runs of each at batch 1 on 2026-12-04)."""

    max_seq_len = 1 << 20

    def __init__(self, vocab_size: int, touch_mib: float):
        self.vocab_size = vocab_size
        self.rows = torch.randn(64, vocab_size, generator=torch.Generator().manual_seed(0))  # (64, V)
        self.weights = torch.randn(max(1, int(touch_mib * 2**20 / 4 / 256)), 256)  # float32 rows of 1 KiB

    def init_cache(self, batch_size: int, capacity: int) -> KVCache:
        return KVCache(0, batch_size, 1, capacity, 1)  # no layers: only the lengths

    def forward(self, tokens, q_lens, cache, *, attention=None):
        self.weights.mv(torch.ones(256))  # streams the weights through the caches, as a layer's matmuls do
        cache.lengths = cache.lengths + torch.as_tensor(q_lens)
        return self.rows[torch.as_tensor(tokens) % len(self.rows)]  # (N, V)


def host_us_per_step(target, draft, batches, k, temperature: float = 0.0) -> float:
    """Microseconds per step outside both models' forward calls, over the demo's batches."""
    wall, steps = 0.0, 0
    sampling = minibass.SamplingParams(temperature=temperature)
    with forward_clock(target, draft, device="cpu") as inside:
        for prompts in batches:
            result = minibass.speculative_generate(target, draft, prompts, 48, sampling=sampling, draft_length=k,
                                                   seed=0)
            wall += result.stats.wall_time
            steps += result.stats.steps
    return 1e6 * (wall - inside["seconds"]) / steps


def regular_ms_per_step(target, batches, temperature: float = 0.0) -> float:
    """Milliseconds per step of regular decoding over the demo's batches (prefill included)."""
    wall, steps = 0.0, 0
    for prompts in batches:
        result = minibass.generate(target, prompts, 48, sampling=minibass.SamplingParams(temperature=temperature),
                                   seed=0)
        wall, steps = wall + result.stats.wall_time, steps + result.stats.steps
    return 1e3 * wall / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--draft-length", type=int, default=4)
    parser.add_argument("--touch-mib", type=float, nargs="+", default=[0, 4, 40],
                        help="MiB of weights each stand-in call reads (0: one row of 1 KiB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's own choice)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default), as the demo")
    args = parser.parse_args(argv)
    if min(args.batch, args.draft_length, args.rounds, 1 if args.threads is None else args.threads) < 1 \
            or min(args.touch_mib) < 0 or not args.temperature >= 0:
        raise ValueError("--batch, --draft-length, --rounds and --threads must be >= 1, --touch-mib and "
                         "--temperature >= 0")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    target, draft, tokenizer = zoo.load_demo_pair()
    batches = zoo.demo_batches(tokenizer, args.batch)
    pairs = {f"stand-ins, {mib:g} MiB read per call": (StandIn(target.vocab_size, mib), StandIn(target.vocab_size, mib))
             for mib in args.touch_mib}
    pairs["the demo pair"] = (target, draft)
    times = {name: [] for name in pairs}
    regular = []
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for name, (t, d) in pairs.items():
            times[name].append(host_us_per_step(t, d, batches, args.draft_length, args.temperature))
        regular.append(regular_ms_per_step(target, batches, args.temperature))
    step_ms = statistics.median(regular[1:])
    tokens = "greedy" if args.temperature == 0 else f"temperature-{args.temperature:g}"
    print(f"batch {args.batch}, k = {args.draft_length}, {sum(map(len, batches))} held-out prompts, 48 new {tokens} "
          f"tokens, {torch.get_num_threads()} threads; median of {args.rounds} rounds; the demo pair's regular "
          f"step (prefill included): {step_ms:.2f} ms")
    print(f"{'':36}  {'host work per step':>18}  {'in regular steps':>16}")
    for name, values in times.items():
        us = statistics.median(values[1:])
        print(f"{name:36}  {us:15.0f} us  {us / 1e3 / step_ms:16.3f}")


if __name__ == "__main__":
    from minibass.bench.common import run_script

    run_script(main)
