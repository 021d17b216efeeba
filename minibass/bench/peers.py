"""minibass next to what users would pick instead, on the shipped demo pair, same prompts, one run.

    python -m minibass.bench peers [--device cpu] [--batch-sizes 1 4 8] [--new-tokens 48]

Four ways to decode the same held-out prompts:

    hf_generate     transformers ``generate``, batched (left padding), regular decoding
    hf_assisted     transformers assisted generation (``assistant_model=draft``); it refuses batches
                    larger than 1, so the batch runs one prompt at a time
    mb_generate     minibass ``generate``, batched, regular decoding
    mb_speculative  minibass ``speculative_generate``, batched, cost-aware draft length (``--draft-length``, default auto)

Greedy (where all four must produce identical tokens: checked and reported) and temperature
0.8 (no top-k / top-p). EOS is ignored so that every method produces the same number of tokens.
"""

from __future__ import annotations

import argparse

import torch

import minibass
from minibass.draft_length import parse_draft_length
from minibass import zoo
from .common import Parser, parse, positive_int, provenance, pyplot, result_path, save_plot, timed, write_json

METHODS = ["hf_generate", "hf_assisted", "mb_generate", "mb_speculative"]


def run(device, batch_sizes, new_tokens, attention, out, plot, reps=3, draft_length="auto"):
    from transformers import AutoModelForCausalLM

    from minibass.loading import hf_dtype

    target_dir, draft_dir = zoo.demo_paths()
    target, draft, tokenizer = zoo.load_demo_pair(device=device)
    hf_target = AutoModelForCausalLM.from_pretrained(target_dir, **hf_dtype(torch.float32)).to(device).eval()
    hf_draft = AutoModelForCausalLM.from_pretrained(draft_dir, **hf_dtype(torch.float32)).to(device).eval()
    for m in (hf_target, hf_draft):
        m.generation_config.eos_token_id = None  # fixed-length outputs for every method
    texts = zoo.demo_prompts(max(batch_sizes))
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    tokenizer.padding_side = "left"
    tokenizer.pad_token = tokenizer.eos_token

    def hf_kwargs(temperature):
        if temperature == 0:
            return dict(do_sample=False)
        return dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)

    def methods(batch_prompts, temperature):
        sampling = minibass.SamplingParams(temperature=temperature)

        def hf_generate():
            enc = tokenizer.pad({"input_ids": batch_prompts}, return_tensors="pt").to(device)
            with torch.inference_mode():  # as minibass's loops run
                ids = hf_target.generate(**enc, max_new_tokens=new_tokens, pad_token_id=tokenizer.eos_token_id,
                                         **hf_kwargs(temperature))
            return ids[:, enc["input_ids"].shape[1]:].tolist()

        def hf_assisted():
            outs = []
            for p in batch_prompts:
                with torch.inference_mode():
                    ids = hf_target.generate(torch.tensor([p], device=device), assistant_model=hf_draft,
                                             max_new_tokens=new_tokens, pad_token_id=tokenizer.eos_token_id,
                                             **hf_kwargs(temperature))
                outs.append(ids[0, len(p):].tolist())
            return outs

        return {
            "hf_generate": hf_generate,
            "hf_assisted": hf_assisted,
            "mb_generate": lambda: minibass.generate(target, batch_prompts, new_tokens, sampling=sampling, seed=0,
                                                     attention=attention).tokens,
            "mb_speculative": lambda: minibass.speculative_generate(
                target, draft, batch_prompts, new_tokens, sampling=sampling, seed=0, draft_length=draft_length,
                attention=attention).tokens,
        }

    for fn in methods(prompts[:1], 0.0).values():  # warm-up
        fn()
    rows = []
    for temperature in (0.0, 0.8):
        for batch in batch_sizes:
            outputs, row = {}, {"temperature": temperature, "batch": batch}
            fns, times = methods(prompts[:batch], temperature), {}
            for _ in range(reps):  # every method once per round, in turn: a slow spell hits them all alike
                for name, fn in fns.items():
                    seconds, outputs[name] = timed(fn, device=device)
                    times.setdefault(name, []).append(seconds)
            for name, seconds in times.items():
                row[f"{name}_tok_s"] = batch * new_tokens / sorted(seconds)[len(seconds) // 2]
            for name in METHODS:
                row[f"{name}_vs_hf_generate"] = row[f"{name}_tok_s"] / row["hf_generate_tok_s"]
            if temperature == 0:
                row["greedy_identical"] = {name: outputs[name] == outputs["mb_generate"] for name in METHODS}
            rows.append(row)
            print(f"T={temperature} B={batch}: " + "  ".join(
                f"{n}={row[f'{n}_tok_s']:.1f} tok/s (x{row[f'{n}_vs_hf_generate']:.2f})" for n in METHODS)
                + (f"  identical={row['greedy_identical']}" if temperature == 0 else ""), flush=True)
    payload = {"provenance": provenance(device), "pair": "shipped demo pair (minibass/zoo/demo)",
               "new_tokens": new_tokens, "attention": attention, "draft_length": draft_length, "reps": reps,
               "timing": "median of reps, the methods timed in turn in each round",
               "note": "hf_assisted runs one prompt at a time: transformers' assisted generation refuses batch > 1",
               "rows": rows}
    print(f"wrote {write_json(out, payload)}")
    if plot:
        print(f"wrote {make_plot(payload, plot)}")
    print(markdown_table(payload))


def markdown_table(payload) -> str:
    lines = ["| temperature | batch | " + " | ".join(METHODS) + " | greedy outputs identical |",
             "|---|---|" + "---|" * len(METHODS) + "---|"]
    for r in payload["rows"]:
        same = "-" if "greedy_identical" not in r else ("yes" if all(r["greedy_identical"].values()) else
                                                       ", ".join(k for k, v in r["greedy_identical"].items() if not v)
                                                       + " differ")
        lines.append(f"| {r['temperature']} | {r['batch']} | " + " | ".join(
            f"{r[f'{n}_tok_s']:.0f} tok/s ({r[f'{n}_vs_hf_generate']:.2f}x)" for n in METHODS) + f" | {same} |")
    return "\n".join(lines)


def make_plot(payload, path):
    plt = pyplot()

    temps = sorted({r["temperature"] for r in payload["rows"]})
    fig, axes = plt.subplots(1, len(temps), figsize=(5 * len(temps), 3.6), sharey=True, squeeze=False)
    for ax, t in zip(axes[0], temps):
        rows = [r for r in payload["rows"] if r["temperature"] == t]
        for name in METHODS:
            ax.plot([r["batch"] for r in rows], [r[f"{name}_tok_s"] for r in rows], "o-", label=name)
        ax.set(title=f"temperature {t}", xlabel="batch size", ylabel="tokens/s")
        ax.set_xticks([r["batch"] for r in rows])
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"demo pair on {payload['provenance']['device']}", fontsize=9)
    return save_plot(fig, path)


def main(argv=None):
    parser = Parser(prog="python -m minibass.bench peers", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--new-tokens", type=positive_int, default=48)
    parser.add_argument("--attention", default=None, choices=sorted(minibass.BACKENDS),
                        help="minibass backend (default: the device's default, minibass.attention.default_backend)")
    parser.add_argument("--reps", type=positive_int, default=3, help="timed runs per cell (the median is reported)")
    parser.add_argument("--draft-length", default="auto", help="minibass's draft-length policy: an int, dynamic, auto")
    parser.add_argument("--out", default=None, help="JSON path (default: bench_results/ for the documented run, "
                                                    "build/bench/ for one with other options)")
    parser.add_argument("--plot", default=None)
    args = parse(parser, argv, "peers")
    kind = args.device.split(":")[0]
    attention = args.attention or minibass.attention.default_backend(args.device)
    try:
        draft_length = parse_draft_length(args.draft_length)
    except ValueError as error:
        parser.error(str(error))
    run(args.device, args.batch_sizes, args.new_tokens, attention,
        result_path(parser, args, f"peers-{kind}.json", args.out),
        result_path(parser, args, f"peers-{kind}.png", args.plot), args.reps, draft_length)
