r"""Trains the demo pair shipped with minibass: a small code model and a distilled draft.

    python -m minibass.zoo.train --out OUT --max-minutes 85              # a whole pair, part 1 (the target)
    python -m minibass.zoo.train --out OUT --max-minutes 80 --resume     # part 2 (the draft; ~170 min in all, 2 cores)
    python -m minibass.zoo.train --out OUT --target-from minibass/zoo/demo/target   # only a new draft
    python -m minibass.zoo.train --out OUT --target-from minibass/zoo/demo/target \
        --draft-from minibass/zoo/demo/draft --on-policy 4096 --draft-steps 2000 --draft-lr 1e-3   # go on distilling
    python -m minibass.zoo.train --out /tmp/pair --fast         # a few steps on a tiny corpus (tests)

The shipped target came from the whole-pair commands with the defaults of its day (its card gives
them); the shipped draft from "only a new draft", then "go on distilling" (its card).

Long runs go in parts: ``--max-minutes M`` stops after M minutes with a checkpoint in
``OUT/_work/``, and ``--resume`` carries on from it (the tokenizer, the random stream of
training windows, the model, the optimizer and the step are all restored), so a run of any
length fits in sessions of limited time. ``--target-shape`` / ``--draft-shape`` (LAYERSxHIDDEN,
32-dimensional heads, half as many kv heads) choose the models.

1. Corpus: the Python standard library's own ``.py`` sources of the running interpreter
   (``sysconfig``), without its test suites; files are split into train / held-out by a hash of
   their path, so held-out numbers are measured on files never trained on.
2. Tokenizer: byte-level BPE (``tokenizers``), saved as ``tokenizer.json`` for
   ``transformers.AutoTokenizer``; it round-trips any text exactly.
3. Target: a Llama model trained with next-token cross-entropy (``transformers``' own
   ``LlamaForCausalLM``, AdamW, cosine schedule).
4. Draft: a much smaller Llama distilled from the target by minimising KL(target || draft) on
   the target's full next-token distributions, which is what drives acceptance up. With
   ``--on-policy N`` half of every batch is text the target wrote itself (N continuations of
   training-text openings, half greedy, half sampled at temperature 1): the text the draft
   will have to predict when it drafts for the target (on-policy distillation, as in
   DistillSpec, Zhou et al. 2024). ``--draft-from`` starts from a trained draft.
   ``--draft-init target`` starts a draft as wide as the target from the target's embeddings,
   first layers and final norm (the target cut short, an early exit), instead of at random.
   ``--untie-head`` gives the draft an output head of its own, starting as a copy of its token
   embeddings (however those started): more parameters at the same cost per call.
   ``--draft-loss tv`` minimises the total-variation distance instead, 1 - sum min(p, q): one minus
   the chance that a temperature-1 draft token is accepted (DistillSpec compares both).
5. Both are saved as Hugging Face folders (bf16 safetensors) with a model card recording the
   corpus, steps, held-out loss / perplexity and measured acceptance rates.

Everything is seeded; rerunning with the same interpreter gives the same corpus and split.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import torch
from tqdm import tqdm

EOS = "<|endoftext|>"
MAX_LEN = 1024  # the models' max_position_embeddings
OPENING = 32  # tokens of training text before each continuation the target writes (--on-policy)
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__"}


def corpus_files(limit: int | None = None) -> tuple[list[Path], list[Path], Path]:
    """(train files, held-out files, stdlib root); held-out = ~5% of files by path hash. ``limit`` (tests):
    that many files in all, the first held-out one among them."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(root).parts))
    held = [p for p in files if int(hashlib.sha256(p.relative_to(root).as_posix().encode()).hexdigest(), 16) % 20 == 0]
    train = [p for p in files if p not in set(held)]
    if limit:
        train, held = train[:limit - 1], held[:1]
    return train, held, root


def read(files: list[Path]) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def train_tokenizer(texts: list[str], vocab_size: int, folder: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=None,
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(folder)
    return fast


def encode_all(tokenizer, texts: list[str]) -> torch.Tensor:
    """One long stream: file, EOS, file, EOS, ..."""
    ids = []
    for text in texts:
        ids.extend(tokenizer.encode(text, add_special_tokens=False))
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def batches(stream: torch.Tensor, batch: int, seq_len: int, generator: torch.Generator):
    """Endless random windows [batch, seq_len + 1] of the token stream."""
    while True:
        starts = torch.randint(0, len(stream) - seq_len - 1, (batch,), generator=generator)
        yield torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()])


def mixed_batches(stream: torch.Tensor, written: torch.Tensor, batch: int, seq_len: int, generator: torch.Generator):
    """Endless batches [batch, seq_len + 1]: half random windows of the stream, half rows of ``written``
    [M, seq_len + 1] (the target's own continuations), drawn at random."""
    windows = batches(stream, batch - batch // 2, seq_len, generator)
    while True:
        rows = torch.randint(0, len(written), (batch // 2,), generator=generator)
        yield torch.cat([next(windows), written[rows]])


@torch.no_grad()
def target_continuations(target_dir: Path, stream: torch.Tensor, n: int, seq_len: int, opening: int,
                         generator: torch.Generator, chunk: int = 64) -> torch.Tensor:
    """[n, seq_len + 1]: ``opening`` tokens of the training stream, then what the target writes after
    them (minibass ``generate``, the saved target): the first half greedy, the second half sampled at
    temperature 1. Openings start at random places of the stream."""
    import minibass

    target = minibass.load_model(target_dir)
    rows = []
    with tqdm(total=n, desc="target continuations", mininterval=5) as bar:
        for temperature, count in ((0.0, n // 2), (1.0, n - n // 2)):
            for start in range(0, count, chunk):
                size = min(chunk, count - start)
                starts = torch.randint(0, len(stream) - opening, (size,), generator=generator).tolist()
                prompts = [stream[s:s + opening].tolist() for s in starts]
                out = minibass.generate(target, prompts, seq_len + 1 - opening, attention="padded",
                                        sampling=minibass.SamplingParams(temperature=temperature),
                                        seed=int(torch.randint(0, 2**31, (1,), generator=generator)))
                rows += [p + o for p, o in zip(prompts, out.tokens)]
                bar.update(size)
    return torch.tensor(rows, dtype=torch.long)


def llama(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, max_len: int, eos: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 8 * 8,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=max_len, tie_word_embeddings=True, bos_token_id=eos,
                         eos_token_id=eos, pad_token_id=eos, rope_theta=10000.0)
    return LlamaForCausalLM(config)


def pretrained(folder: Path):
    """A saved Llama in float32, and its shape as ``parse_shape`` gives it: (hidden, layers, heads, kv_heads)."""
    from transformers import LlamaForCausalLM

    from minibass.loading import hf_dtype

    model = LlamaForCausalLM.from_pretrained(folder, **hf_dtype(torch.float32))
    c = model.config
    return model, (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads)


def init_from_target(draft, target) -> None:
    """Copies the target's token embeddings, its first ``len(draft layers)`` layers and its final norm into
    the draft, which starts as the target cut short after those layers (an early exit) instead of at random.

    The two must have the same hidden size, head layout, vocabulary and tying of the embeddings to the
    head; anything else raises ``ValueError``.
    """
    d, t = draft.config, target.config
    same = ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "tie_word_embeddings")
    if any(getattr(d, a) != getattr(t, a) for a in same) or d.num_hidden_layers > t.num_hidden_layers:
        raise ValueError("--draft-init target needs a draft with the target's hidden size, heads, vocabulary "
                         "and tying, and no more layers: draft "
                         + ", ".join(f"{a} {getattr(d, a)}" for a in same) + f", {d.num_hidden_layers} layers; target "
                         + ", ".join(f"{a} {getattr(t, a)}" for a in same) + f", {t.num_hidden_layers} layers")
    m = draft.model
    with torch.no_grad():
        m.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        m.norm.weight.copy_(target.model.norm.weight)
        for mine, theirs in zip(m.layers, target.model.layers):
            mine.load_state_dict(theirs.state_dict())
        if not d.tie_word_embeddings:
            draft.lm_head.weight.copy_(target.lm_head.weight)


def untie_head(model) -> None:
    """Gives a model whose output head is its token embedding matrix a head of its own, starting as a copy
    of that matrix: the same function, and the same cost per call (the head's matmul is as large either
    way), with the head free to learn apart from the embeddings."""
    if not model.config.tie_word_embeddings:
        return
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def fit(model, steps: int, data, generator: torch.Generator, peak_lr: float, loss_fn, desc: str,
        checkpoint: Path, deadline: float | None, monitor=None) -> bool:
    """AdamW with a cosine schedule for ``steps`` steps; returns True when done.

    ``monitor()`` (optional) is called every 200 steps and its value printed: a curve to watch, never
    used to choose anything (the schedule and the step count are fixed in advance).

    Saves model, optimizer, step and the data generator's state to ``checkpoint`` every 50 steps,
    at the end, and when ``deadline`` (a time.time()) passes, then returns False: rerun with
    ``--resume`` to carry on. Resumes from ``checkpoint`` when it exists.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    start, losses, seconds = 0, [], 0.0
    tied = bool(model.config.tie_word_embeddings)
    if checkpoint.exists():  # our own file: tensors, numbers and lists only
        state = torch.load(checkpoint, weights_only=True)
        if state.get("tied", True) != tied:
            was = "tied to" if state.get("tied", True) else "apart from"
            raise ValueError(f"{checkpoint} holds a model whose head is {was} its embeddings, but this run builds "
                             f"it {'tied' if tied else 'apart'}: resume with the flags of the run that wrote it "
                             "(--untie-head)")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        start, losses, seconds = state["step"], state["losses"], state["seconds"]

    def save(step: int, elapsed: float) -> None:
        save_atomically({"model": model.state_dict(), "optimizer": opt.state_dict(), "generator": generator.get_state(),
                         "step": step, "losses": losses, "seconds": elapsed, "tied": tied}, checkpoint)

    model.train()
    began = time.time()
    bar = tqdm(range(start, steps), desc=desc, mininterval=5, initial=start, total=steps)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr, warmup=max(1, steps // 20))
        loss = loss_fn(next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        if monitor is not None and (step + 1) % 200 == 0:
            model.eval()
            print(f"{desc} step {step + 1}: held-out {monitor(model):.3f}", flush=True)
            model.train()
        if (step + 1) % 50 == 0 or step + 1 == steps or (deadline is not None and time.time() > deadline):
            save(step + 1, seconds + time.time() - began)
            if deadline is not None and time.time() > deadline and step + 1 < steps:
                print(f"{desc}: stopped at step {step + 1}/{steps} (--max-minutes); rerun with --resume", flush=True)
                return False
    model.eval()
    return True


def save_atomically(state: dict, path: Path) -> None:
    """``torch.save`` to a temporary file, then renamed over ``path``: a run killed while writing leaves the
    previous checkpoint whole."""
    partial = path.with_name(path.name + ".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def minutes_spent(checkpoint: Path) -> float:
    return torch.load(checkpoint, weights_only=True)["seconds"] / 60


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """'LAYERSxHIDDEN' -> (hidden, layers, heads, kv_heads) with 32-dimensional heads; ``ValueError`` for a
    shape that is not LAYERSxHIDDEN with LAYERS >= 1 and HIDDEN a positive multiple of 32."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdecimal() for p in parts) or int(parts[0]) < 1 or int(parts[1]) < 32 \
            or int(parts[1]) % 32:
        raise ValueError(f"a shape is LAYERSxHIDDEN, LAYERS >= 1 and HIDDEN a multiple of 32 (32-dimensional "
                         f"heads), e.g. 1x192; got {text!r}")
    layers, hidden = int(parts[0]), int(parts[1])
    heads = hidden // 32
    return hidden, layers, heads, max(1, heads // 2)


def held_out_windows(stream: torch.Tensor, seq_len: int, max_windows: int = 64) -> int:
    """How many windows of ``seq_len`` tokens ``held_out_loss`` reads: the first ``max_windows`` of the stream, or
    as many as it holds."""
    return min(max_windows, (len(stream) - 1) // seq_len)


@torch.no_grad()
def held_out_loss(model, stream: torch.Tensor, seq_len: int, max_windows: int = 64) -> float:
    """Mean next-token cross-entropy over the first ``max_windows`` windows of ``seq_len`` tokens of the
    stream: with the defaults 16,384 tokens, the first few files of the held-out stream (cards say so)."""
    windows = stream[: (len(stream) - 1) // seq_len * seq_len + 1]
    n = held_out_windows(stream, seq_len, max_windows)
    total = 0.0
    for i in range(n):
        x = windows[i * seq_len:(i + 1) * seq_len + 1][None]
        total += torch.nn.functional.cross_entropy(model(x[:, :-1]).logits[0], x[0, 1:]).item()
    return total / max(1, n)


def acceptance(target_dir: Path, draft_dir: Path, prompts: list[list[int]], new_tokens: int) -> dict:
    """Acceptance rate of the saved (bf16-rounded) pair through minibass, per temperature and k (seed 0)."""
    import minibass

    runs = acceptance_runs(minibass.load_model(target_dir), minibass.load_model(draft_dir), prompts, new_tokens)
    return {key: rates[0] for key, rates in runs.items()}


def acceptance_runs(target, draft, prompts: list[list[int]], new_tokens: int, seeds: int = 1) -> dict:
    """Acceptance rates of a pair through minibass (padded backend), per temperature and k = 2, 4, 6:
    {"T=0,k=2": [rate], ..., "T=1,k=6": [rate of seed 0, ..., rate of seed seeds - 1]}; greedy runs once."""
    import minibass

    out = {}
    for temperature in (0.0, 1.0):
        for k in (2, 4, 6):
            out[f"T={temperature:g},k={k}"] = [
                round(minibass.speculative_generate(target, draft, prompts, new_tokens, draft_length=k, seed=seed,
                                                    sampling=minibass.SamplingParams(temperature=temperature),
                                                    attention="padded").stats.acceptance_rate, 4)
                for seed in (range(seeds) if temperature else [0])]
    return out


def held_out_prompts(tokenizer, texts: list[str], n: int, length: int, sources: list[int] | None = None
                     ) -> list[list[int]]:
    """The first `length` tokens of function definitions in held-out files, in file order: the first ``n``
    found (with the defaults, 32 from the first two files). ``sources``, if given, receives the index in
    ``texts`` of each prompt's file."""
    prompts = []
    for index, text in enumerate(texts):
        for i, line in enumerate(text.splitlines()):
            if line.lstrip().startswith("def ") and len(prompts) < n:
                snippet = "\n".join(text.splitlines()[i:i + 6])
                ids = tokenizer.encode(snippet, add_special_tokens=False)[:length]
                if len(ids) == length:
                    prompts.append(ids)
                    if sources is not None:
                        sources.append(index)
    return prompts


def write_demo_prompts(held_files: list[Path], root: Path, path: Path) -> None:
    """The demo's prompts, shipped as data: the first two lines of the first function definition of
    each held-out file (``minibass.zoo.demo_prompts`` reads them)."""
    prompts = []
    for file in held_files:
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith("def ") and line.rstrip().endswith(":"):
                prompts.append({"file": str(file.relative_to(root)), "line": i + 1,
                                "text": "\n".join(lines[i:i + 2]) + "\n"})
                break
    about = ("Held-out prompts of the demo pair: the first two lines of the first function definition in each "
             "standard-library file the pair never trained on (the training script's path-hash split), Python "
             + sys.version.split()[0] + ".")
    path.write_text(json.dumps({"about": about, "prompts": prompts}, indent=1) + "\n")


MODEL_CARD = """---
library_name: transformers
tags: [minibass, speculative-decoding, demo]
---
# minibass demo {role}

{summary}

| | |
|---|---|
| architecture | Llama: {layers}, hidden {hidden}, {heads} heads ({kv_heads} kv), vocab {vocab}, {tying}, {params:,} parameters |
| weights | bfloat16 safetensors |
| corpus | the `.py` sources of the Python {python} standard library (`sysconfig` stdlib path), without test suites, `idlelib` and `lib2to3`: {n_train} train files ({train_tokens:,} tokens), {held_files} ({held_tokens:,} tokens), split by path hash |
| training | {steps}, batch {batch} x {seq_len} tokens, AdamW, cosine schedule, peak lr {lr}, seed {seed}, {minutes:.1f} min on {device}{history} |
| held-out loss | {held_loss:.3f} nats/token (perplexity {held_ppl:.1f}), over the first {loss_tokens:,} tokens of the held-out stream |
| acceptance (this pair, held-out prompts, minibass `speculative_generate`) | {acceptance} |

Made by {made_by} ({date}).
"""


def save(model, tokenizer, folder: Path):
    """A Hugging Face folder: the weights rounded to bfloat16 (a copy: ``model`` itself is left as it is, so
    that a run goes on from the same float32 weights whether or not it saved them on the way), the tokenizer."""
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    # transformers 5 names the class "TokenizersBackend", which 4.x cannot import; "PreTrainedTokenizerFast"
    # is the same class in 5.x and loads in both.
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, before any work, options that would fail or mislead only after hours of training."""
    for option in ("target_steps", "draft_steps", "batch", "vocab"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    if not 2 <= args.seq_len <= MAX_LEN:
        parser.error(f"--seq-len must be in [2, {MAX_LEN}] (the models' max_position_embeddings), got {args.seq_len}")
    if args.vocab < 257:
        parser.error(f"--vocab must be >= 257 (the 256 bytes and end-of-text), got {args.vocab}")
    for option in ("target_lr", "draft_lr"):
        if not getattr(args, option) > 0:
            parser.error(f"--{option.replace('_', '-')} must be > 0, got {getattr(args, option)}")
    if args.max_minutes is not None and not args.max_minutes >= 0:
        parser.error(f"--max-minutes must be >= 0, got {args.max_minutes}")
    if args.on_policy < 0:
        parser.error(f"--on-policy must be >= 0, got {args.on_policy}")
    if args.on_policy and args.batch < 2:
        parser.error("--on-policy fills half of every batch with the target's text: it needs --batch >= 2")
    if args.on_policy and args.seq_len < OPENING:
        parser.error(f"--on-policy continues {OPENING}-token openings of training text: it needs --seq-len >= {OPENING}")
    for option in ("target_shape", "draft_shape"):
        try:
            parse_shape(getattr(args, option))
        except ValueError as error:
            parser.error(f"--{option.replace('_', '-')}: {error}")
    for option in ("target_from", "draft_from"):
        folder = getattr(args, option)
        if folder is not None and not (folder / "config.json").is_file():
            parser.error(f"--{option.replace('_', '-')} {folder}: no Hugging Face model folder there (no config.json)")
    if args.draft_from is not None and args.target_from is None:
        parser.error("--draft-from needs --target-from (a draft goes on distilling from the target it was made for)")
    if args.draft_from is not None and args.draft_init != "random":
        parser.error("--draft-init target starts a new draft; --draft-from goes on with a trained one: give one of them")
    if args.draft_init == "target":  # the draft is the target cut short: as wide, and no deeper
        hidden, layers, _, _ = parse_shape(args.draft_shape)
        if args.target_from is not None:
            config = json.loads((args.target_from / "config.json").read_text())
            target_hidden, target_layers = config["hidden_size"], config["num_hidden_layers"]
        else:
            target_hidden, target_layers, _, _ = parse_shape(args.target_shape)
        if hidden != target_hidden or layers > target_layers:
            parser.error(f"--draft-init target needs a draft as wide as the target and no deeper: draft "
                         f"{layers}x{hidden}, target {target_layers}x{target_hidden}")


# What a part may change when it resumes a run: how long it runs, that it resumes, and how it spells OUT.
PART_OPTIONS = {"max_minutes", "resume", "out"}


def resumed_parts(parser: argparse.ArgumentParser, args: argparse.Namespace, work: Path, argv: list[str]) -> list:
    """This run's parts so far, this one last: [{"argv": its command line, "minutes": how long it ran (None
    for this one until ``part_ended``)}], kept in ``work/run.json`` with the run's options. A ``--resume``
    part must give the options of the part that started the run (all but ``--max-minutes`` and the
    spelling of ``OUT``): the checkpoints, the random stream and the card all follow them."""
    options = {k: (str(v.resolve()) if isinstance(v, Path) else v) for k, v in vars(args).items()
               if k not in PART_OPTIONS}
    record = work / "run.json"
    if args.resume:
        if not record.exists():
            parser.error(f"--resume: {work} holds no unfinished run (it is removed when a run finishes"
                         + ("; its checkpoints were written by a version that kept no run.json: start again)"
                            if work.exists() else ")"))
        before = json.loads(record.read_text())
        changed = [f"--{k.replace('_', '-')} {before['options'].get(k)!r} -> {v!r}"
                   for k, v in options.items() if before["options"].get(k) != v]
        if changed:
            parser.error("--resume carries on with the options of the run that wrote the checkpoints; changed: "
                         + ", ".join(changed))
        parts = before["parts"] + [{"argv": list(argv), "minutes": None}]
    else:
        parts = [{"argv": list(argv), "minutes": None}]
    work.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"options": options, "parts": parts}, indent=1) + "\n")
    return parts


def part_ended(work: Path, parts: list, started: float) -> None:
    """Records in ``parts`` and ``work/run.json`` how long this part (the last) ran, from ``started``."""
    parts[-1]["minutes"] = (time.time() - started) / 60
    record = work / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "parts": parts}, indent=1) + "\n")


def part_words(part: dict) -> str:
    """One part for a card: its command, and how long it ran (unknown for a part killed before it ended)."""
    took = "killed: time not recorded" if part["minutes"] is None else f"{part['minutes']:.1f} min"
    return f"`python -m minibass.zoo.train {shlex.join(part['argv'])}` ({took})"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m minibass.zoo.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder that receives target/ and draft/")
    parser.add_argument("--fast", action="store_true", help="tiny corpus, tiny models, a few steps (for tests)")
    parser.add_argument("--target-steps", type=int, default=2200)
    parser.add_argument("--draft-steps", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-lr", type=float, default=2e-3, help="peak learning rate of the target")
    parser.add_argument("--draft-lr", type=float, default=3e-3, help="peak learning rate of the draft")
    parser.add_argument("--target-shape", default="12x256", help="LAYERSxHIDDEN of the target (default 12x256)")
    parser.add_argument("--draft-shape", default="1x192", help="LAYERSxHIDDEN of the draft (default 1x192)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop after this many minutes with a checkpoint; carry on with --resume")
    parser.add_argument("--resume", action="store_true", help="carry on from the checkpoints in OUT/_work/")
    parser.add_argument("--target-from", type=Path, default=None, metavar="DIR",
                        help="keep the trained target (and its tokenizer) in DIR and distil only a new draft from it")
    parser.add_argument("--draft-from", type=Path, default=None, metavar="DIR",
                        help="start the draft from the weights in DIR (with --target-from) instead of at random")
    parser.add_argument("--draft-loss", choices=["kl", "tv"], default="kl",
                        help="kl: KL(target || draft), the default; tv: the total-variation distance, which is "
                             "1 - the chance that a draft token sampled at temperature 1 is accepted")
    parser.add_argument("--draft-init", choices=["random", "target"], default="random",
                        help="target: start the draft from the target's token embeddings, first layers and final "
                             "norm (the draft's hidden size must be the target's); random: transformers' own init")
    parser.add_argument("--untie-head", action="store_true",
                        help="give the draft an output head of its own instead of its token embeddings, starting "
                             "as a copy of them (random ones, the target's or --draft-from's); the same cost per call")
    parser.add_argument("--on-policy", type=int, default=0, metavar="N",
                        help="distil the draft half on N continuations the target writes itself (0: corpus only)")
    args = parser.parse_args(argv)
    if args.fast:  # tiny defaults; options given on the command line still win
        parser.set_defaults(target_steps=4, draft_steps=3, batch=2, seq_len=32, vocab=300, target_shape="2x64",
                            draft_shape="1x64" if args.draft_init == "target" else "1x32")
        args = parser.parse_args(argv)
    check_options(parser, args)
    torch.manual_seed(args.seed)
    started = time.time()
    deadline = started + 60 * args.max_minutes if args.max_minutes is not None else None
    out = Path(args.out)
    tmp = out / "_work"
    if tmp.exists() and not args.resume:
        shutil.rmtree(tmp)  # a fresh run
    parts = resumed_parts(parser, args, tmp, sys.argv[1:] if argv is None else argv)

    train_files, held_files, root = corpus_files(limit=12 if args.fast else None)
    train_texts, held_texts = read(train_files), read(held_files)
    print(f"corpus: {len(train_files)} train / {len(held_files)} held-out files from {root}", flush=True)
    if args.target_from is not None or (tmp / "tokenizer.json").exists():
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast.from_pretrained(args.target_from or tmp)
    else:
        tokenizer = train_tokenizer(train_texts, args.vocab, tmp)
    train_stream, held_stream = encode_all(tokenizer, train_texts), encode_all(tokenizer, held_texts)
    print(f"tokens: {len(train_stream):,} train, {len(held_stream):,} held-out", flush=True)
    gen = torch.Generator().manual_seed(args.seed)
    vocab, eos = len(tokenizer), tokenizer.eos_token_id

    shapes = {"target": parse_shape(args.target_shape), "draft": parse_shape(args.draft_shape)}
    target = llama(vocab, *shapes["target"], MAX_LEN, eos)
    draft = llama(vocab, *shapes["draft"], MAX_LEN, eos)
    # (Both are built at random first even when loaded below: that keeps the random stream, and so a
    # --target-from run's draft, what it has always been.)
    kept = None  # the target's own metrics when it is kept from --target-from
    if args.target_from is not None:
        target, shapes["target"] = pretrained(args.target_from)
        target.eval()
        metrics_file = args.target_from.parent / "metrics.json"
        kept = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    if args.draft_from is not None:
        draft, shapes["draft"] = pretrained(args.draft_from)

    def lm_loss(x):
        logits = target(x[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))

    def watch(model):  # the held-out loss on a few windows, printed as training goes
        return held_out_loss(model, held_stream, args.seq_len, max_windows=16)

    if kept is None and not fit(target, args.target_steps, batches(train_stream, args.batch, args.seq_len, gen), gen, args.target_lr,
               lm_loss, "target", tmp / "target.pt", deadline, None if args.fast else watch):
        part_ended(tmp, parts, started)
        return

    def kd_loss(x):
        with torch.no_grad():
            teacher = torch.log_softmax(target(x[:, :-1]).logits.float(), -1)
        student = torch.log_softmax(draft(x[:, :-1]).logits.float(), -1)
        if args.draft_loss == "tv":  # TV(p, q) = 1 - sum min(p, q), one minus the temperature-1 acceptance chance
            return 0.5 * (teacher.exp() - student.exp()).abs().sum(-1).mean()
        return torch.nn.functional.kl_div(student.reshape(-1, vocab), teacher.reshape(-1, vocab),
                                          log_target=True, reduction="batchmean")  # KL(target || draft)

    if args.draft_init == "target" and not (tmp / "draft.pt").exists():  # (a resumed run loads its checkpoint)
        init_from_target(draft, target)
    if args.untie_head:  # (before fit, so that a resumed run loads its checkpoint into the same model)
        untie_head(draft)
    data = batches(train_stream, args.batch, args.seq_len, gen)
    if args.on_policy:
        written_file = tmp / "on_policy.pt"  # made once, kept for --resume
        if not written_file.exists():
            target_dir = args.target_from
            if target_dir is None:  # the target was trained in this run: save it first
                target_dir = tmp / "target"
                save(target, tokenizer, target_dir)
            began = time.time()
            rows = target_continuations(target_dir, train_stream, args.on_policy, args.seq_len, OPENING, gen)
            save_atomically({"rows": rows, "seconds": time.time() - began}, written_file)
        written = torch.load(written_file, weights_only=True)
        data = mixed_batches(train_stream, written["rows"], args.batch, args.seq_len, gen)
    if not fit(draft, args.draft_steps, data, gen, args.draft_lr,
               kd_loss, "draft", tmp / "draft.pt", deadline):
        part_ended(tmp, parts, started)
        return
    draft_minutes = minutes_spent(tmp / "draft.pt")
    target_minutes = minutes_spent(tmp / "target.pt") if kept is None else kept.get("minutes", {}).get("target", 0.0)

    part_ended(tmp, parts, started)  # (the evaluation below takes a minute or so more)
    common_parts = [{"command": shlex.join(part["argv"]),
                     "minutes": None if part["minutes"] is None else round(part["minutes"], 2)} for part in parts]
    losses = {name: held_out_loss(m, held_stream, args.seq_len) for name, m in (("target", target), ("draft", draft))}
    # A kept target's learning rate is its own run's (its metrics.json), not this run's --target-lr.
    target_lr = args.target_lr if kept is None else kept.get("lr", {}).get("target")
    common = dict(python=sys.version.split()[0], n_train=len(train_files), n_held=len(held_files),
                  train_tokens=len(train_stream), held_tokens=len(held_stream), batch=args.batch,
                  seq_len=args.seq_len, lr={"target": target_lr, "draft": args.draft_lr}, seed=args.seed, vocab=vocab,
                  device=f"CPU ({torch.get_num_threads()} threads)", argv=shlex.join(parts[-1]["argv"]),
                  date=time.strftime("%Y-%m-%d"), parts=common_parts)
    if kept is not None:
        common["target_from"] = str(args.target_from)
    folders = {"target": out / "target", "draft": out / "draft"}
    if kept is not None and args.target_from.resolve() != folders["target"].resolve():
        shutil.copytree(args.target_from, folders["target"], dirs_exist_ok=True)
    for name, model in (("target", target), ("draft", draft)):
        if name == "draft" or kept is None:
            save(model, tokenizer, folders[name])  # weights first: acceptance is measured on the saved pair
    sources = []
    prompts = held_out_prompts(tokenizer, held_texts, 2 if args.fast else 32, 8 if args.fast else 24, sources)
    new_tokens = 8 if args.fast else 48
    rates = acceptance(folders["target"], folders["draft"], prompts or [[eos]], new_tokens)
    rates_text = (", ".join(f"{k}: {v}" for k, v in rates.items()) + f" ({len(prompts)} prompts of "
                  f"{len(prompts[0]) if prompts else 1} tokens from {plural(len(set(sources)), 'held-out file')}, "
                  f"{new_tokens} new tokens, seed 0, the saved bfloat16 weights)")
    summary = {
        "target": "The target of minibass's demo pair: a small code model trained from scratch.",
        "draft": "The draft of minibass's demo pair, distilled from the target (" +
                 ("KL to its distributions" if args.draft_loss == "kl" else
                  "total-variation distance to its distributions") + ").",
    }
    for name, model in (("target", target), ("draft", draft)):
        if name == "target" and kept is not None:  # a kept target keeps its card; only the pair's acceptance changes
            card = (folders[name] / "README.md").read_text()
            row = "| acceptance (this pair, held-out prompts, minibass `speculative_generate`) | "
            (folders[name] / "README.md").write_text("\n".join(
                row + rates_text + " |" if line.startswith(row) else line
                for line in card.splitlines()) + "\n")
            continue
        hidden, layers, heads, kv_heads = shapes[name]
        history = ""
        if name == "draft" and args.draft_init == "target":
            first = "first layer" if layers == 1 else f"first {layers} layers"
            history += (f"; started from the target's token embeddings, {first} and final norm, an early exit of "
                        f"the target (`--draft-init target`)")
        if name == "draft" and args.on_policy:
            history += (f"; half of every batch from {args.on_policy} continuations written by the target "
                        f"(half greedy, half at temperature 1; writing them took {written['seconds'] / 60:.1f} min)")
        if name == "draft" and args.draft_from is not None:
            before_file = args.draft_from.parent / "metrics.json"
            before = json.loads(before_file.read_text()) if before_file.exists() else {}
            made = before.get("parts") or ([{"command": before["argv"]}] if "argv" in before else [])
            history += (f"; started from the draft in `{args.draft_from}`" +
                        (", made by " + " then ".join(f"`python -m minibass.zoo.train {part['command']}`" for part in made)
                         + f" in {before['minutes']['draft']:.1f} min" if made else ""))
        card = MODEL_CARD.format(role=name, summary=summary[name], hidden=hidden, heads=heads,
                                 layers="1 layer" if layers == 1 else f"{layers} layers",
                                 kv_heads=kv_heads, params=sum(p.numel() for p in model.parameters()),
                                 tying="tied embeddings" if model.config.tie_word_embeddings else "untied output head",
                                 steps=plural(args.target_steps if name == "target" else args.draft_steps, "step"),
                                 minutes=target_minutes if name == "target" else draft_minutes,
                                 held_loss=losses[name], held_ppl=math.exp(losses[name]),
                                 acceptance=rates_text, history=history,
                                 held_files=plural(len(held_files), "held-out file"),
                                 loss_tokens=held_out_windows(held_stream, args.seq_len) * args.seq_len,
                                 made_by=" then ".join(map(part_words, parts)),
                                 **{**common, "lr": common["lr"][name]})
        (folders[name] / "README.md").write_text(card)
    minutes = {"target": target_minutes, "draft": draft_minutes}
    if args.on_policy:
        minutes["draft_on_policy_text"] = written["seconds"] / 60
    metrics = {"held_out_loss": losses, "acceptance": rates, "minutes": minutes, "draft_loss": args.draft_loss,
               **common}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    write_demo_prompts(held_files, root, out / "prompts.json")
    shutil.rmtree(tmp)
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
