"""Batched plain decoding: minibass ``generate`` vs transformers ``generate``, same random model.

    python -m minibass.bench decode [--batch-sizes 1 4 16] [--new-tokens 64] [--device cpu]

Reports tokens/s per batch size and backend (``default`` = ``attention=None``, the backend
minibass picks for the device), the ratio to transformers, and where minibass's time goes
per decoding step: inside the model's forward calls vs everything else (sampling, bookkeeping).
Greedy decoding with equal-length prompts, so transformers needs no padding and both do the
same work. Each repetition runs every contender once, in turn, so that a slow spell of the
machine hits them all alike; the median over repetitions is reported.
"""

from __future__ import annotations

import argparse
import tempfile

import torch

import minibass
from .common import (Parser, forward_clock, parse, positive_int, provenance, random_llama, result_path, timed,
                     write_json)


def run(batch_sizes, new_tokens, prompt_len, backends, device, dtype, out, reps=5):
    from transformers import AutoModelForCausalLM

    from minibass.loading import hf_dtype

    with tempfile.TemporaryDirectory() as folder:
        random_llama(folder)
        ours = minibass.load_model(folder, dtype=dtype, device=device)
        hf = AutoModelForCausalLM.from_pretrained(folder, **hf_dtype(dtype)).to(device).eval()
    hf.generation_config.eos_token_id = None
    greedy = minibass.SamplingParams(temperature=0)
    default = minibass.attention.default_backend(device)
    rows = []
    payload = {"provenance": provenance(device), "model": "random Llama, 4 layers, hidden 256, 8 heads (4 kv), "
               "vocab 4096", "default_backend": default, "reps": reps,
               "timing": "median of reps, contenders interleaved, after a warm-up", "prompt_len": prompt_len,
               "new_tokens": new_tokens, "dtype": str(dtype), "rows": rows}
    for batch in batch_sizes:
        prompts = torch.randint(0, ours.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(batch))
        # Both engines decode under inference mode, as minibass.generate does.
        hf_generate = torch.inference_mode()(hf.generate)
        calls = {"transformers": lambda: hf_generate(prompts.to(device), max_new_tokens=new_tokens, do_sample=False,
                                                     pad_token_id=0)}
        for backend in backends:
            calls[backend] = (lambda b=backend: minibass.generate(ours, prompts.tolist(), new_tokens, sampling=greedy,
                                                                  attention=None if b == "default" else b))
        seconds = {name: [] for name in calls}
        forward_seconds = {name: [] for name in calls}
        for call in calls.values():
            call()  # warm-up
        for _ in range(reps):
            for name, call in calls.items():
                with forward_clock(ours, device=device) as spent:
                    elapsed, _ = timed(call, device=device)
                seconds[name].append(elapsed)
                forward_seconds[name].append(spent["seconds"])
        median = {name: sorted(v)[len(v) // 2] for name, v in seconds.items()}
        hf_seconds = median["transformers"]
        row = {"batch": batch, "transformers_tok_s": batch * new_tokens / hf_seconds}
        for backend in backends:
            runs = sorted(zip(seconds[backend], forward_seconds[backend]))
            total, forward = runs[len(runs) // 2]  # the median run
            row[f"minibass_{backend}_tok_s"] = batch * new_tokens / total
            row[f"minibass_{backend}_ratio"] = hf_seconds / total
            row[f"minibass_{backend}_step_ms"] = {"forward": 1e3 * forward / new_tokens,
                                                  "other": 1e3 * (total - forward) / new_tokens}
        rows.append(row)
        write_json(out, payload)  # after every batch size: a run stopped early keeps what it measured
        print(f"batch {batch}: transformers {row['transformers_tok_s']:.0f} tok/s" + "".join(
            f"  |  {b} {row[f'minibass_{b}_tok_s']:.0f} tok/s ({row[f'minibass_{b}_ratio']:.2f}x), per step "
            f"{row[f'minibass_{b}_step_ms']['forward']:.2f} ms forward + {row[f'minibass_{b}_step_ms']['other']:.2f} "
            f"ms other" for b in backends), flush=True)
    print(f"wrote {out}")
    return payload


def main(argv=None):
    parser = Parser(prog="python -m minibass.bench decode", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--new-tokens", type=positive_int, default=64)
    parser.add_argument("--prompt-len", type=positive_int, default=32)
    parser.add_argument("--backends", nargs="+", default=None,
                        help="'default' (attention=None) and/or backend names (default: 'default' and every "
                             "backend but ragged on the CPU, where it is interpreted)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--reps", type=positive_int, default=5,
                        help="timed runs per contender (the median is reported)")
    parser.add_argument("--out", default=None,
                        help="JSON path (default bench_results/decode-<device>.json for the documented run, "
                             "build/bench/ for one with other options)")
    args = parse(parser, argv, "decode")
    kind = args.device.split(":")[0]
    unknown = sorted(set(args.backends or []) - {"default", *minibass.BACKENDS})
    if unknown:
        parser.error(f"unknown backends {unknown}: choose from default, {', '.join(minibass.BACKENDS)}")
    backends = args.backends or ["default"] + [b for b in minibass.BACKENDS if kind != "cpu" or b != "ragged"]
    out = result_path(parser, args, f"decode-{kind}.json", args.out)
    run(args.batch_sizes, args.new_tokens, args.prompt_len, backends, args.device, getattr(torch, args.dtype), out,
        args.reps)
