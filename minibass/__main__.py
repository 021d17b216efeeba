"""Command line.

    python -m minibass demo       regular vs batched speculative decoding on the shipped demo pair
    python -m minibass generate   decode prompts given as text with any local target (and draft) folders
    python -m minibass oracle     check another engine's attention kernel, rejection sampler or generator

``--help`` after a command lists its options.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path

import torch

from minibass.draft_length import parse_draft_length


def _load(args):
    """(target, draft or None, tokenizer) from --target/--draft folders, or the shipped demo pair."""
    import minibass
    from minibass import zoo

    dtype = getattr(torch, args.dtype)
    if args.target:
        target = minibass.load_model(args.target, dtype=dtype, device=args.device)
        tokenizer = minibass.load_tokenizer(args.target)
        draft = minibass.load_model(args.draft, dtype=dtype, device=args.device) if args.draft else None
        if args.draft:
            _check_same_tokenizer(tokenizer, args.target, args.draft)
        return target, draft, tokenizer
    if args.draft:
        raise ValueError("--draft needs --target too")
    return zoo.load_demo_pair(dtype=dtype, device=args.device)


def _demo_target():
    from minibass import zoo

    return zoo.demo_paths()[0]


def _eos_ids(target_dir, tokenizer) -> list[int] | None:
    """The tokens that end a completion: the tokenizer's end-of-text token and those the checkpoint's
    ``generation_config.json`` names (a list in Llama 3's, e.g. <|end_of_text|> and <|eot_id|>)."""
    ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    path = Path(target_dir) / "generation_config.json"
    if path.exists():
        try:
            named = json.loads(path.read_text()).get("eos_token_id")
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{path} is not a JSON object: {e}") from None
        ids += [named] if isinstance(named, int) else list(named or [])
    return sorted(set(ids)) or None


def _check_same_tokenizer(tokenizer, target_dir, draft_dir):
    import minibass

    try:
        draft_tokenizer = minibass.load_tokenizer(draft_dir)
    except (OSError, ValueError):
        return  # a draft folder without tokenizer files: the vocabulary sizes are still checked
    if draft_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"the tokenizers of {target_dir} and {draft_dir} differ; speculative decoding needs the "
                         f"draft to share the target's vocabulary")


def _sampling(args):
    import minibass

    return minibass.SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def _table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A plain aligned text table: columns are (key, header)."""
    cells = [[header for _, header in columns]] + [[str(r.get(key, "")) for key, _ in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _reading(rows, costs_by_batch: dict, batch: int, k: int) -> str:
    """One paragraph: where a step's time went in the run of the fixed k with the highest speed-up (why it pays or not),
    and at what batch size it would stop paying on this device."""
    from minibass.costmodel import alpha_from_accepted, speedup_from_costs

    fixed = next((r for r in rows if r["policy"] == str(k)), None)
    if fixed is None:
        return "(give a fixed draft length in --draft-lengths for a reading of the table)"
    # Per step of the speculative run (prefill included), in regular steps of the regular run of the same round.
    r = fixed["paired_regular_ms"]
    steps = fixed["steps"]
    verify, drafts, host = (fixed["target_ms"] / steps / r, fixed["draft_ms"] / steps / r, fixed["host_ms"] / steps / r)
    step_cost = verify + drafts + host
    # The regular run takes one step per token of its longest sequence: steps per batch x batches.
    pace = fixed["paired_regular_steps"] / steps  # tokens per step of the batch's slowest sequence
    alpha = alpha_from_accepted(fixed["mean_accepted"], k)
    probe = costs_by_batch[batch]["regular"]  # a regular step of that round against the probe printed just above
    lines = []
    # A regular step of the run includes its share of the prefill: with only a few steps a batch (a small
    # --max-new-tokens) the prefill alone makes it dearer than the probe's 1-token step, and that is no stall.
    few_steps = fixed["paired_regular_steps"] / fixed["batches"] < 8
    if r > 2 * probe and not few_steps:
        lines.append(f"Caution: in the round read below, a regular step took {r:.2f} ms, {r / probe:.1f} times the "
                     f"{probe:.2f} ms of the probe above: the machine stalled during that round's regular run, so its "
                     f"ratios (and the table's) are off; run the demo again, or with --repeats 7 for the median of "
                     f"more rounds.")
    elif r < probe / 2:
        lines.append(f"Caution: the probe above timed a regular step at {probe:.2f} ms, {probe / r:.1f} times the "
                     f"{r:.2f} ms of the round read below: the machine was busy while the probes ran, so the "
                     f"\"measured now\" line and the predictions at the end are off; run the demo again.")
    lines += [f"Reading: with k = {k} (the fixed length with the highest speed-up), a step cost on average (in the "
             f"round with the median speed-up, prefill included, in regular steps of {r:.2f} ms, the regular run of "
             f"that round) one verify {verify:.2f} + "
             f"{fixed['draft_calls'] / steps:.1f} draft calls {drafts:.2f} + the loop's own work outside the forward "
             f"calls (sampling, the rejection step, roll-back, bookkeeping) {host:.2f} = {step_cost:.2f}."]
    # alpha: the chance per draft token that gives the mean accepted prefix seen. The table's acceptance (accepted /
    # proposed) also counts the drafts after a rejection, which usually makes it the lower; but near the budget a
    # step with no draft counts in the mean accepted and not in the proposed, which lowers alpha a little.
    per_token = (f"per-token acceptance {alpha:.2f}: as if each draft token were accepted on its own with that "
                 f"chance; the table's acceptance also counts the drafts after a rejection")
    # The regular run's steps are the tokens of each batch's longest sequence; both counts are summed over batches.
    batches = fixed["batches"]
    slowest = (f"{fixed['paired_regular_steps']} tokens in {steps} steps" if batches == 1 else
               f"{fixed['paired_regular_steps'] / batches:g} tokens in {steps / batches:.1f} steps, the mean over "
               f"{batches} batches")
    if batch > 1:
        lines.append(f"Each sequence emitted {1 + fixed['mean_accepted']:.2f} tokens per step on average "
                     f"({per_token}), but a batch steps until its slowest sequence is done: "
                     f"{pace:.2f} tokens per step for that one ({slowest}),")
    else:
        lines.append(f"Each sequence emitted {pace:.2f} tokens per step ({slowest}; {per_token}),")
    # pace / step_cost is that round's ratio of wall times, which is the median ratio for an odd --repeats.
    shown = ("the speed-up in the table" if abs(pace / step_cost - fixed["speedup"]) < 5e-3 else
             f"that round's speed-up (the table shows {fixed['speedup']:.2f}x, the mean of the two middle rounds)")
    lines.append(f"so {pace:.2f} / {step_cost:.2f} = {pace / step_cost:.2f}x, {shown}; without the host work it "
                 f"would be {pace:.2f} / {verify + drafts:.2f} = {pace / (verify + drafts):.2f}x.")

    def predicted(c):
        return speedup_from_costs(c["regular"], c["verify"], c["draft"], k=k, alpha=alpha)

    predictions = {b: predicted(cb) for b, cb in sorted(costs_by_batch.items())}
    stops = [b for b, x in predictions.items() if x < 1.0]
    trend = ", ".join(f"batch {b}: {x:.2f}x" for b, x in predictions.items())
    if stops:
        s = costs_by_batch[stops[0]]
        end = (f"speculative decoding stops paying on this device from batch {stops[0]} on: there a verify of "
               f"{k + 1} tokens per sequence costs {s['verify'] / s['regular']:.2f} regular steps and a draft call "
               f"{s['draft'] / s['regular']:.2f}.")
    else:
        end = ("per sequence it would pay at every batch size measured here" +
               ("; a batch gains less, as it waits for its slowest sequence." if batch > 1 else "."))
    items = list(predictions.items())  # they tend to fall as the batch grows
    rises = [f"batch {b1}'s prediction is {100 * (x1 / x0 - 1):.1f} % above batch {b0}'s"
             for (b0, x0), (b1, x1) in zip(items, items[1:]) if x1 > x0 * 1.15]
    if rises:
        named = "; ".join(rises)
        end += (f" ({named[0].upper()}{named[1:]}. Each comes from a few short probes: where one rises with the batch "
                f"by more than 15 %, the machine may have been busy while it was timed; a rise of a few percent can be "
                f"this CPU's own.)")
    lines.append(f"Predicted per sequence from the forward calls alone, timed at each batch size ({trend}): {end}")
    return " ".join(lines)


def _ms_per_step(result) -> float:
    """Milliseconds per step of a run (prefill included)."""
    return 1e3 * result.stats.wall_time / result.stats.steps


def _merged(results):
    """One result for several batches decoded one after the other: tokens in order, counts and times summed."""
    from minibass.generate import GenerationResult, GenerationStats

    stats = GenerationStats(speculative=results[0].stats.speculative)
    for r in results:
        for name in ("steps", "target_calls", "draft_calls", "proposed_tokens", "accepted_tokens", "sequence_steps",
                     "new_tokens", "wall_time"):
            setattr(stats, name, getattr(stats, name) + getattr(r.stats, name))
        stats.draft_lengths += r.stats.draft_lengths
        for phase, seconds in r.stats.time_split.items():
            stats.time_split[phase] = stats.time_split.get(phase, 0.0) + seconds
    return GenerationResult([t for r in results for t in r.tokens], stats)


def _schedule(repeats: int, batches: int, policies: list) -> list[tuple]:
    """The demo's runs in the order they are timed: (round, batch, policy), None for regular decoding.

    Every method decodes each batch of prompts in turn, back to back: the regular run first, then the
    speculative ones, in an order rotated by one for each batch and each round, so that none is always
    the furthest from the regular run it is compared with. A slow spell of the machine (it lasts
    seconds) then falls on every method alike, however many batches a round has.
    """
    order = []
    for r in range(repeats):
        for b in range(batches):
            turn = (r + b) % len(policies)
            order += [(r, b, p) for p in [None] + policies[turn:] + policies[:turn]]
    return order


_STARTED = time.monotonic()  # with `python -m minibass`: after the package's import (torch), 2-5 s in
DEMO_SECONDS = 50.0  # what the demo aims to finish within from _STARTED: with the imports, under a minute
ROUNDS, SLOW_ROUNDS = 5, 3  # rounds of every method by default, and on a machine too slow for five


def _all_rounds_fit(elapsed: float, per_round: float) -> bool:
    """After the first ``SLOW_ROUNDS`` of the default ``ROUNDS``: whether the rest still let the demo finish
    within ``DEMO_SECONDS`` of its start, ``elapsed`` seconds ago. What follows the rounds (the cost probes at
    five batch sizes and the sampled completion) takes about two rounds' time. All the rest or none, so that
    the number of rounds stays odd and the median is one round's ratio."""
    return elapsed + (ROUNDS - SLOW_ROUNDS + 2) * per_round <= DEMO_SECONDS


def demo(args) -> int:
    """Regular batched decoding vs batched speculative decoding with fixed draft lengths, BASS dynamic and auto."""
    from tqdm import tqdm

    import minibass
    from minibass import zoo
    from minibass.bench.common import call_costs, forward_clock, rate_text

    for option, value in (("--batch-size", args.batch_size), ("--prompts", args.prompts),
                          ("--max-new-tokens", args.max_new_tokens), ("--repeats", args.repeats)):
        if value is not None and value < 1:
            raise ValueError(f"{option} must be >= 1, got {value}")
    # each once; a bad one said now, not after loading and a first run
    policies = list(dict.fromkeys(parse_draft_length(p) for p in args.draft_lengths))
    minibass.sampling.SeedStreams(args.seed, 1)  # a bad seed, likewise
    target, draft, tokenizer = _load(args)
    if draft is None:
        raise ValueError("the demo compares speculative decoding against regular decoding: give --draft too")
    # The same prompts at every batch size up to --prompts, decoded in batches of --batch-size, so that
    # speed-ups at different batch sizes are measured on the same text (one prompt is an anecdote).
    batch = args.batch_size
    groups = zoo.demo_batches(tokenizer, batch, args.prompts)
    prompts = [p for group in groups for p in group]
    backend = args.attention or minibass.attention.default_backend(args.device)
    greedy = minibass.SamplingParams(temperature=0)
    print(f"target {sum(p.numel() for p in target.parameters()):,} params, draft "
          f"{sum(p.numel() for p in draft.parameters()):,} params; {len(prompts)} held-out prompts "
          f"({min(map(len, prompts))}-{max(map(len, prompts))} tokens) in {len(groups)} batch"
          f"{'es' if len(groups) > 1 else ''} of {batch}, {args.max_new_tokens} new greedy tokens, "
          f"attention {backend!r}, device {args.device}; tokens/s: median of the runs of each method; speed-up: "
          f"median of its per-round ratios to regular; rounds: "
          f"{args.repeats or f'{ROUNDS} ({SLOW_ROUNDS} if {ROUNDS} would take the demo past a minute)'}")
    common = dict(seed=args.seed, attention=backend)
    minibass.generate(target, prompts[:1], 2, **common)  # warm-up
    minibass.speculative_generate(target, draft, prompts[:1], 4, draft_length=4, **common)
    parts = {}  # (method, round) -> [(result, forward seconds of each model)], one per batch of prompts
    repeats = args.repeats or ROUNDS
    schedule = _schedule(repeats, len(groups), policies)
    bar = tqdm(total=len(schedule), desc="decoding", leave=False)
    rounds_started, cut = time.monotonic(), None
    first_after_slow_rounds = SLOW_ROUNDS * len(schedule) // repeats  # the schedule runs round by round
    for i, (r, group, policy) in enumerate(schedule):
        if args.repeats is None and i == first_after_slow_rounds:
            per_round = (time.monotonic() - rounds_started) / SLOW_ROUNDS
            if not _all_rounds_fit(time.monotonic() - _STARTED, per_round):
                repeats = SLOW_ROUNDS
                cut = (f"(a round took {per_round:.1f} s, so {ROUNDS} rounds would take the demo past a minute: "
                       f"{SLOW_ROUNDS} rounds; --repeats {ROUNDS} asks for {ROUNDS} whatever they take)")
                break
        name = "regular" if policy is None else str(policy)
        # Each model's forward calls timed apart: the rest of the run is the loop's own work on the host.
        with forward_clock(target, device=args.device) as target_clock, \
                forward_clock(draft, device=args.device) as draft_clock:
            if policy is None:
                result = minibass.generate(target, groups[group], args.max_new_tokens, sampling=greedy, **common)
            else:
                result = minibass.speculative_generate(target, draft, groups[group], args.max_new_tokens,
                                                       sampling=greedy, draft_length=policy, **common)
        parts.setdefault((name, r), []).append((result, {"target": target_clock["seconds"],
                                                         "draft": draft_clock["seconds"]}))
        bar.update()
    bar.close()
    if cut:
        print(cut)
    # A method's run in a round: its batches merged, in order; its forward seconds summed.
    names, rounds = ["regular"] + [str(p) for p in policies], range(repeats)
    runs = {n: [_merged([result for result, _ in parts[n, r]]) for r in rounds] for n in names}
    forward_seconds = {n: [{m: sum(s[m] for _, s in parts[n, r]) for m in ("target", "draft")} for r in rounds]
                       for n in names}
    # Speed-up: the median over repeats of each run against the regular run of the same repeat, so
    # that a slow spell of the machine, which lasts seconds, cancels out of each ratio.
    ratios = {name: [r.stats.tokens_per_second / b.stats.tokens_per_second for r, b in zip(rs, runs["regular"])]
              for name, rs in runs.items()}
    speedups = {name: statistics.median(rs) for name, rs in ratios.items()}
    # The round each row describes (and the reading accounts for): the one with the median ratio, so that
    # its step's costs add up to the speed-up shown; for regular decoding, its median run by tokens/s.
    medians = {name: sorted(range(len(rs)), key=lambda i: ratios[name][i] if name != "regular" else
                            rs[i].stats.tokens_per_second)[len(rs) // 2] for name, rs in runs.items()}
    results = {name: runs[name][i] for name, i in medians.items()}
    fixed = [p for p in policies if isinstance(p, int)]  # the reading explains the one with the highest speed-up
    k = max(fixed, key=lambda p: speedups[str(p)]) if fixed else 4
    rows = []
    for name, result in results.items():
        s = result.stats
        lengths = s.draft_lengths
        speedup = speedups[name]
        rows.append({
            "policy": name, "mean_accepted": s.mean_accepted,
            "speedup": speedup,
            "method": "regular generate" if name == "regular" else f"speculative, k = {name}",
            "tok_s": f"{statistics.median(r.stats.tokens_per_second for r in runs[name]):.1f}",
            "x": f"{speedup:.2f}x",
            "accept": rate_text(s.acceptance_rate),
            "per_step": "-" if s.mean_accepted is None else f"{s.mean_accepted:.2f}",
            "calls": s.target_calls, "steps": s.steps,
            "draft": "-" if not lengths else f"{min(lengths)}..{max(lengths)} (mean {sum(lengths) / len(lengths):.1f})",
            # Where that round's time went, for the reading: forward calls of each model, the rest on the host.
            "target_ms": 1e3 * forward_seconds[name][medians[name]]["target"],
            "draft_ms": 1e3 * forward_seconds[name][medians[name]]["draft"],
            "host_ms": 1e3 * (s.wall_time - sum(forward_seconds[name][medians[name]].values())),
            "draft_calls": s.draft_calls,
            "paired_regular_ms": _ms_per_step(runs["regular"][medians[name]]),
            "paired_regular_steps": runs["regular"][medians[name]].stats.steps,
            "batches": len(groups),
        })
    print(_table(rows, [("method", "method"), ("tok_s", "tokens/s"), ("x", "speed-up"), ("accept", "acceptance"),
                        ("per_step", "accepted/step"), ("calls", "target calls"), ("draft", "draft lengths")]))
    batches = sorted({1, 4, batch, 16, 32})
    costs = {b: call_costs(target, draft, b, k + 1) for b in batches}
    c = costs[batch]
    print(f"\nmeasured now at batch {batch}: one regular step {c['regular']:.2f} ms; one draft call "
          f"{c['draft']:.2f} ms = {c['draft'] / c['regular']:.2f} regular steps; one verify of {k + 1} tokens "
          f"{c['verify']:.2f} ms = {c['verify'] / c['regular']:.2f} regular steps")
    print(textwrap.fill(_reading(rows, costs, batch, k), width=100))

    # The timed runs above emit max_new_tokens each, so that every method does the same work. This one stops
    # at end-of-text, and its prompt leaves out the final newline: the tokenizer writes a newline and the next
    # line's indentation as one token, so in training a bare newline token came only where the next line, after
    # any blank lines, was unindented, or at the end of a file; after one the target starts a new file
    # (end-of-text) about one time in seven.
    eos = tokenizer.eos_token_id
    text = zoo.demo_prompts(1)[0].rstrip("\n")
    sampled = minibass.speculative_generate(target, draft, [tokenizer.encode(text, add_special_tokens=False)],
                                            args.max_new_tokens, draft_length="auto", eos_token_id=eos,
                                            sampling=minibass.SamplingParams(temperature=0.8), **common)
    tokens = sampled.tokens[0]
    ended = eos is not None and tokens[-1:] == [eos]
    print(f"\n--- a completion sampled at temperature 0.8 (speculative, auto): the first prompt without its final "
          f"newline, then {len(tokens)} new tokens{', the last one end-of-text' if ended else ''} ---")
    print(text + tokenizer.decode(tokens[:-1] if ended else tokens) + ("\n[end of text]" if ended else ""))
    print("---")
    same = all(results[str(p)].tokens == results["regular"].tokens for p in policies)
    print(f"greedy check: speculative output {'==' if same else '!='} regular output for all {len(prompts)} prompts "
          f"and {len(policies)} draft-length policies: {'OK' if same else 'MISMATCH'}")
    return 0 if same else 1


def generate(args) -> int:
    """Decodes the given prompts with a target (and a draft: then speculatively)."""
    import minibass

    draft_length = parse_draft_length(args.draft_length or "dynamic")  # a bad one said before anything loads
    minibass.sampling.SeedStreams(args.seed, 1)  # a bad seed, likewise
    if args.target and not args.draft and args.draft_length is not None:
        raise ValueError("--draft-length needs --draft: a target alone decodes without a draft")
    target, draft, tokenizer = _load(args)
    prompts = [tokenizer.encode(p) for p in args.prompt]  # the tokenizer's default: a BOS where it adds one
    eos = None if args.ignore_eos else _eos_ids(args.target or _demo_target(), tokenizer)
    common = dict(sampling=_sampling(args), seed=args.seed, attention=args.attention, eos_token_id=eos)
    if draft is None:
        result = minibass.generate(target, prompts, args.max_new_tokens, **common)
    else:
        result = minibass.speculative_generate(target, draft, prompts, args.max_new_tokens,
                                               draft_length=draft_length, **common)
    s = result.stats
    completions = [tokenizer.decode(t) for t in result.tokens]
    if args.json:
        print(json.dumps({"completions": completions, "tokens": result.tokens, "stats": {
            "steps": s.steps, "target_calls": s.target_calls, "draft_calls": s.draft_calls,
            "draft_lengths": s.draft_lengths, "acceptance_rate": s.acceptance_rate,
            "tokens_per_target_call": s.tokens_per_target_call, "new_tokens": s.new_tokens,
            "wall_time_s": s.wall_time, "tokens_per_second": s.tokens_per_second, "time_split_s": s.time_split}}))
        return 0
    for prompt, completion in zip(args.prompt, completions):
        print(f"--- {prompt!r}\n{prompt}{completion}")
    rate = "" if s.acceptance_rate is None else f", acceptance {s.acceptance_rate:.2f}"
    print(f"--- {s.new_tokens} tokens in {s.wall_time:.2f} s ({s.tokens_per_second:.1f} tokens/s), "
          f"{s.target_calls} target calls{rate}")
    return 0


class _Parser(argparse.ArgumentParser):
    """A usage error in one line on stderr (exit 2), as the commands' own usage errors are, not the usage block."""

    def error(self, message):
        self.exit(2, f"error: {message} (usage: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from minibass.attention import BACKENDS

    backends = sorted(BACKENDS)
    from minibass import __version__

    parser = _Parser(prog="python -m minibass", description="minibass: batched speculative decoding")
    parser.add_argument("--version", action="version", version=f"minibass {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p, *, default_tokens):
        p.add_argument("--target", help="target checkpoint folder (default: the shipped demo pair)")
        p.add_argument("--draft", help="draft checkpoint folder sharing the target's tokenizer")
        p.add_argument("--max-new-tokens", type=int, default=default_tokens,
                       help=f"new tokens per prompt (default {default_tokens})")
        p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
        p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"],
                       help="the models' weights and activations (default float32)")
        p.add_argument("--seed", type=int, default=0, help="seed of the per-sequence random streams (default 0)")

    p = sub.add_parser("demo", help="regular vs batched speculative decoding on the shipped pair")
    common(p, default_tokens=48)
    p.add_argument("--batch-size", type=int, default=8, help="sequences decoded together (default 8)")
    p.add_argument("--prompts", type=int, default=8,
                   help="held-out prompts to decode, in batches of --batch-size (default 8, at least one batch)")
    p.add_argument("--draft-lengths", nargs="+", default=["1", "2", "3", "4", "dynamic", "auto"],
                   help="draft-length policies to compare (default: 1 2 3 4 dynamic auto)")
    p.add_argument("--attention", default=None, choices=backends,
                   help="attention backend (default: 'ragged' on CUDA with Triton, 'padded' on a CPU)")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"runs of each method, the median is shown (default {ROUNDS}, or {SLOW_ROUNDS} where the "
                        f"first {SLOW_ROUNDS} show that {ROUNDS} would take the demo past a minute)")
    p.set_defaults(func=demo)

    p = sub.add_parser("generate", help="decode text prompts with local checkpoint folders")
    common(p, default_tokens=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens and any tied with the k-th (default 0: all)")
    p.add_argument("--top-p", type=float, default=1.0,
                   help="keep the most likely tokens up to this probability mass (default 1.0: all)")
    p.add_argument("--draft-length", default=None,
                   help="an int, 'dynamic' (BASS Algorithm 1, the default), 'per-sequence' or 'auto' (cost-aware); "
                        "speculative decoding only (the demo pair, or --target with --draft)")
    p.add_argument("--prompt", action="append", required=True,
                   help="a text prompt, encoded as the tokenizer encodes by default (with its BOS token where "
                        "it adds one, as transformers' pipelines do); repeat for a batch")
    p.add_argument("--attention", default=None, choices=backends,
                   help="attention backend (default: 'ragged' on CUDA with Triton, 'padded' on a CPU)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="always produce --max-new-tokens tokens (else a completion stops at the tokenizer's end "
                        "token or any the target's generation_config.json names)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=generate)

    from minibass.oracle.cli import add_parser

    add_parser(sub)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
    except (ValueError, FileNotFoundError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        code = 2
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as other shell tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        code = 141  # 128 + SIGPIPE, the shell's status for a writer whose reader left
    sys.exit(code)


if __name__ == "__main__":
    main()
