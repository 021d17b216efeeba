"""Command line: ``python -m minibass demo`` (``--help`` lists the options)."""

from __future__ import annotations

import argparse
import sys
import tempfile

import torch


def demo(args) -> None:
    """Decodes a ragged batch with a small random Llama model and prints the tokens and tokens/s."""
    import minibass
    from minibass.bench.common import random_llama

    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        random_llama(folder, layers=4, hidden=256, vocab=4096)
        model = minibass.load_model(folder, device=args.device)
    gen = torch.Generator().manual_seed(args.seed)
    lengths = [5 + (7 * b) % 23 for b in range(args.batch_size)]  # ragged prompt lengths
    prompts = [torch.randint(0, model.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    sampling = minibass.SamplingParams(temperature=args.temperature)
    print(f"model: random Llama (4 layers, hidden 256, vocab 4096) on {args.device}; "
          f"batch {args.batch_size}, prompt lengths {lengths}, {args.max_new_tokens} new tokens, "
          f"attention={args.attention}, {sampling}")
    result = minibass.generate(model, prompts, args.max_new_tokens, sampling=sampling, seed=args.seed,
                               attention=args.attention)
    for b, tokens in enumerate(result.tokens[:4]):
        print(f"  sequence {b}: prompt {prompts[b][:6]}... -> {tokens[:12]}{' ...' if len(tokens) > 12 else ''}")
    s = result.stats
    print(f"{s.new_tokens} tokens in {s.wall_time:.2f} s = {s.tokens_per_second:.1f} tokens/s "
          f"({s.target_calls} forward calls)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minibass", description="minibass: batched speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="decode a batch and report tokens/s")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--attention", default="split", choices=["naive", "padded", "split", "ragged"],
                   help="attention backend (ragged runs in Triton's interpreter on the CPU: slow)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=demo)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
