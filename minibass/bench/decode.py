"""Batched plain decoding: minibass ``generate`` vs transformers ``generate``, same random model.

    python -m minibass.bench decode [--batch-sizes 1 4 16] [--new-tokens 64] [--device cpu]

Reports tokens/s per batch size and backend, and the ratio to transformers. Greedy decoding
with equal-length prompts, so transformers needs no padding and both do the same work.
"""

from __future__ import annotations

import argparse
import tempfile

import torch

import minibass
from .common import median_timed, provenance, random_llama, write_json


def run(batch_sizes, new_tokens, prompt_len, backends, device, dtype, out, reps=3):
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as folder:
        random_llama(folder)
        ours = minibass.load_model(folder, dtype=dtype, device=device)
        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    hf.generation_config.eos_token_id = None
    greedy = minibass.SamplingParams(temperature=0)
    rows = []
    for batch in batch_sizes:
        prompts = torch.randint(0, ours.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(batch))
        hf_gen = lambda: hf.generate(prompts.to(device), max_new_tokens=new_tokens, do_sample=False,  # noqa: E731
                                     pad_token_id=0)
        hf_gen()  # warm-up
        hf_seconds, _ = median_timed(lambda: torch.no_grad()(hf_gen)(), device=device, reps=reps)
        row = {"batch": batch, "transformers_tok_s": batch * new_tokens / hf_seconds}
        for backend in backends:
            call = lambda: minibass.generate(ours, prompts.tolist(), new_tokens, sampling=greedy,  # noqa: E731
                                             attention=backend)
            call()  # warm-up
            seconds, _ = median_timed(call, device=device, reps=reps)
            row[f"minibass_{backend}_tok_s"] = batch * new_tokens / seconds
            row[f"minibass_{backend}_ratio"] = hf_seconds / seconds
        rows.append(row)
        print("  ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    payload = {"provenance": provenance(device), "model": "random Llama, 4 layers, hidden 256, 8 heads (4 kv), "
               "vocab 4096", "reps": reps, "timing": "median of reps", "prompt_len": prompt_len, "new_tokens": new_tokens, "dtype": str(dtype), "rows": rows}
    print(f"wrote {write_json(out, payload)}")
    return payload


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m minibass.bench decode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--backends", nargs="+", default=None,
                        help="attention backends to time (default: all but ragged on the CPU, where it is interpreted)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--reps", type=int, default=3, help="timed runs per cell (the median is reported)")
    parser.add_argument("--out", default=None, help="JSON path (default bench_results/decode-<device>.json)")
    args = parser.parse_args(argv)
    backends = args.backends or [b for b in minibass.BACKENDS if args.device != "cpu" or b != "ragged"]
    out = args.out or f"bench_results/decode-{args.device.split(':')[0]}.json"
    run(args.batch_sizes, args.new_tokens, args.prompt_len, backends, args.device, getattr(torch, args.dtype), out,
        args.reps)
