"""What one more token per sequence costs a target forward call, measured against the roofline.

    python scripts/verify_cost.py [--batch 8] [--context 48] [--tokens 1 2 3 5] [--threads N] [--target DIR]

Speculative decoding pays when a verify call of k + 1 tokens per sequence costs about one
regular step: the roofline (``minibass.costmodel``) promises that while a call is memory-bound.
This script times the demo target (or ``--target DIR``) at ``--batch`` sequences with 1, 2, ...
new tokens each, in turns of all token counts so that a slow spell of the machine hits them
alike (the median of the rounds' medians), and prints for each call:

- its time, and its time relative to a 1-token call;
- what the roofline predicts with this CPU's roofs as ``costmodel.measure_cpu`` measures them
  (a 512 x 512 fp32 matmul for the peak, a sum over a 256 MB tensor for the bandwidth);
- the added time per added token per sequence, and the FLOP rate that added work ran at
  (``ModelShape.flops``, matmuls and attention).

If the added tokens run at the FLOP rate of a compute-bound call, the verify is not free: the
step's weights are not what limits it.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from transformers import AutoConfig

import minibass
from minibass import costmodel as cm
from minibass import zoo
from minibass.bench.common import call_ms, run_script


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None, help="checkpoint folder (default: the demo pair's target)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=48, help="tokens already cached per sequence")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 5], help="new tokens per sequence")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--reps", type=int, default=15, help="calls per timing (the median is kept)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's own choice)")
    args = parser.parse_args(argv)
    if min(args.tokens) < 1 or args.batch < 1 or args.rounds < 1 or 1 not in args.tokens:
        raise ValueError("--tokens must be >= 1 and include 1; --batch and --rounds must be >= 1")
    if args.reps < 1 or args.context < 0 or (args.threads is not None and args.threads < 1):
        raise ValueError("--reps and --threads must be >= 1, --context >= 0")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    folder = args.target or zoo.demo_paths()[0]
    model = minibass.load_model(folder)  # float32 on the CPU, as the demo runs it
    shape = cm.ModelShape.from_config(AutoConfig.from_pretrained(folder), bytes_per_element=4)
    cpu = cm.measure_cpu()
    times = {t: [] for t in args.tokens}
    for _ in range(args.rounds):
        for t in args.tokens:
            times[t].append(call_ms(model, args.batch, args.context, t, reps=args.reps))
    ms = {t: statistics.median(v) for t, v in times.items()}
    print(f"{folder}: {shape.params / 1e6:.1f} M parameters, fp32; batch {args.batch}, {args.context} cached tokens "
          f"per sequence; {cpu.name}: peak {cpu.peak_flops / 1e9:.0f} GFLOP/s, bandwidth {cpu.bandwidth / 1e9:.1f} "
          f"GB/s, ridge point {cpu.ridge_point:.1f} FLOPs/byte")
    print(f"{'tokens/seq':>10}  {'ms':>7}  {'x 1-token':>9}  {'roofline x':>10}  {'intensity':>9}  "
          f"{'added ms/token':>14}  {'added work GFLOP/s':>18}")
    roof = {t: cm.step_time(shape, cpu, args.batch, t, args.context) for t in args.tokens}
    for t in args.tokens:
        added = ""
        if t > 1:
            extra_ms = (ms[t] - ms[1]) / (t - 1)
            extra_flops = (shape.flops(args.batch, t, args.context) - shape.flops(args.batch, 1, args.context)) / (t - 1)
            rate = f"{extra_flops / (extra_ms * 1e-3) / 1e9:.0f}" if extra_ms > 0 else "-"
            added = f"{extra_ms:14.2f}  {rate:>18}"
        print(f"{t:10d}  {ms[t]:7.2f}  {ms[t] / ms[1]:9.2f}  {roof[t] / roof[1]:10.2f}  "
              f"{shape.intensity(args.batch, t, args.context):9.1f}  {added}")


if __name__ == "__main__":
    run_script(main)
