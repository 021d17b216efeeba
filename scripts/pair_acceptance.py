"""Measures drafts against one target: acceptance on held-out prompts, and the cost of a draft call.

    python scripts/pair_acceptance.py --draft minibass/zoo/demo/draft build/pair-x/draft --out F.json

For each draft, with the target (default: the demo pair's):
- acceptance rates on the training script's 32 held-out prompts (the first 24 tokens of function
  definitions in the held-out files, ``held_out_prompts`` of ``minibass.zoo.train``: the first 32
  found, all from the first two files), or with ``--prompts every-file`` on the first two of each
  held-out file that has them (56 from 29 of the 31 files), 48 new tokens,
  through ``speculative_generate`` with the padded backend, as the training script's model cards do:
  greedy, and at temperature 1 with seeds 0 .. ``--seeds`` - 1 (one run's rate is noisy), for k = 2, 4, 6;
- the cost of one draft call (1 token per sequence) in target decode steps at ``--batch``, with the
  default backend over a 64-token cache: ``--rounds`` rounds, each timing the target's step and then
  every draft (medians of 15 calls), the drafts' order rotated by one each round, so that they meet
  the same spells of a busy machine and none is always timed first.
Prints a table and writes everything to ``--out`` (JSON), with the command that made it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

import minibass
from minibass.bench.common import call_ms, provenance
from minibass.zoo import train


def rates(target, draft, prompts, seeds: int) -> dict:
    """The training script's acceptance runs (48 new tokens), with each cell's mean over the seeds."""
    return {key: {"mean": round(statistics.fmean(runs), 4), "runs": runs}
            for key, runs in train.acceptance_runs(target, draft, prompts, 48, seeds).items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, default=Path("minibass/zoo/demo/target"))
    parser.add_argument("--draft", type=Path, nargs="+", required=True)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--prompts", choices=["script", "every-file"], default="script",
                        help="script: the training script's 32 (default); every-file: two from each held-out file")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for option, value in (("--seeds", args.seeds), ("--batch", args.batch), ("--rounds", args.rounds)):
        if value < 1:  # said now, not after the acceptance runs
            raise ValueError(f"{option} must be >= 1, got {value}")
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.target)
    _, held_files, _ = train.corpus_files()
    texts = train.read(held_files)
    if args.prompts == "script":
        prompts = train.held_out_prompts(tokenizer, texts, 32, 24)
    else:
        prompts = [p for text in texts for p in train.held_out_prompts(tokenizer, [text], 2, 24)]
    target = minibass.load_model(args.target)
    drafts = {str(d): minibass.load_model(d) for d in args.draft}
    started = time.time()
    command = shlex.join(["python", "scripts/pair_acceptance.py", *(sys.argv[1:] if argv is None else argv)])
    result = {"provenance": {**provenance("cpu"), "command": command}, "command": command,
              "target": str(args.target), "prompts": len(prompts), "prompt_set": args.prompts, "new_tokens": 48, "seeds": args.seeds,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "drafts": {}}
    for name, draft in drafts.items():
        result["drafts"][name] = {"acceptance": rates(target, draft, prompts, args.seeds),
                                  "parameters": sum(p.numel() for p in draft.parameters())}
        print(name, json.dumps(result["drafts"][name]["acceptance"]), flush=True)
    ratios, names = {name: [] for name in drafts}, list(drafts)
    for r in range(args.rounds):
        step = call_ms(target, args.batch, 64, 1)
        for name in names[r % len(names):] + names[:r % len(names)]:
            ratios[name].append(call_ms(drafts[name], args.batch, 64, 1) / step)
    for name in drafts:
        result["drafts"][name]["draft_call_over_target_step"] = {
            "batch": args.batch, "median": round(statistics.median(ratios[name]), 4),
            "rounds": [round(r, 4) for r in ratios[name]]}
    result["seconds"] = round(time.time() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'draft':40s} {'k=2 T0':>7s} {'k=4 T0':>7s} {'k=6 T0':>7s} {'k=2 T1':>7s} {'k=4 T1':>7s} {'k=6 T1':>7s}  call")
    for name, d in result["drafts"].items():
        a = d["acceptance"]
        cells = [a[f"T={t},k={k}"]["mean"] for t in ("0", "1") for k in (2, 4, 6)]
        print(f"{name:40s} " + " ".join(f"{c:7.3f}" for c in cells) + f"  {d['draft_call_over_target_step']['median']:.3f}")


if __name__ == "__main__":
    from minibass.bench.common import run_script

    run_script(main)
