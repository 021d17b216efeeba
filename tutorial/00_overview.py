# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 00 · What is BASS, and how is this course laid out?
#
# A large language model writes one token per forward call. Each call reads every weight of the
# model from memory to do very little arithmetic with it, so a GPU (or a CPU) spends most of the
# call waiting for memory. **Speculative decoding** (Leviathan et al. 2023; Chen et al. 2023) lets
# a small *draft* model guess `k` tokens, and the large *target* model checks all of them in one
# call; a modified rejection rule keeps the output distributed exactly as the target's own sampling.
# **BASS** (Qian et al. 2024, *Batched Attention-optimized Speculative Sampling*) does this for a
# whole batch: each sequence accepts a different number of tokens, so the KV caches go *ragged*,
# and attention has to cope.
#
# This course walks from one token at a time to batched, ragged, proven speculative decoding. Each
# chapter answers one question, imports minibass rather than re-implementing it, measures
# something live, and, from chapter 01 on, ends with an exercise that a cell checks.
#
# ## The demo in ten lines
#
# minibass ships a small trained pair: a 12-layer target and a 1-layer draft distilled from it,
# trained on Python code (`minibass/zoo/demo`).

# %%
import matplotlib.pyplot as plt

import minibass
from minibass import zoo
from minibass.course import size

target, draft, tokenizer = zoo.load_demo_pair()
prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(size(4, 8))]
greedy = minibass.SamplingParams(temperature=0.0)
# A warm-up: a process's first calls are slow.
minibass.speculative_generate(target, draft, prompts[:1], 4, draft_length=4)
speed = {"regular": [], "speculative": []}  # tokens/s of three runs each, alternating: one run can hit a stall
for _ in range(3):
    regular = minibass.generate(target, prompts, 32, sampling=greedy)
    spec = minibass.speculative_generate(target, draft, prompts, 32, sampling=greedy, draft_length=4)
    assert spec.tokens == regular.tokens  # greedy: the very same tokens, faster or not
    speed["regular"].append(regular.stats.tokens_per_second)
    speed["speculative"].append(spec.stats.tokens_per_second)
median = {name: sorted(runs)[1] for name, runs in speed.items()}
# One completion sampled at temperature 0.8 (it reads better than greedy), stopping at end-of-text. Its
# prompt leaves out the final newline: the tokenizer writes a newline and the next line's indentation
# as one token, so a bare newline token ends a block, and after one the target expects a new file
# (end-of-text) about one time in seven.
first = tokenizer.encode(zoo.demo_prompts(1)[0].rstrip("\n"), add_special_tokens=False)
sampled = minibass.speculative_generate(target, draft, [first], 40, seed=0, eos_token_id=tokenizer.eos_token_id,
                                        sampling=minibass.SamplingParams(temperature=0.8))
print(tokenizer.decode(first + sampled.tokens[0]))
print(f"median of 3 runs: regular {median['regular']:.0f} tokens/s, speculative {median['speculative']:.0f} tokens/s, "
      f"acceptance {spec.stats.acceptance_rate:.2f}, target calls {regular.stats.target_calls} -> {spec.stats.target_calls}")

# %% [markdown]
# The same tokens came out of both (greedy decoding makes that a plain equality check), with far
# fewer calls of the target. Whether that makes it *faster* depends on what a target call costs
# against a draft call on this machine, and on the batch size: that is chapters 01, 09 and 10.

# %%
fig, ax = plt.subplots(figsize=(5, 2.4))
ax.barh(["regular", "speculative (k = 4)"], [median["regular"], median["speculative"]], color=["tab:gray", "tab:blue"])
ax.set_xlabel("tokens per second (median of 3 runs, this machine)")
ax.set_title(f"the demo pair, batch {len(prompts)}, greedy")
fig.tight_layout()
plt.show()

# %% [markdown]
# What to see: the two bars compare throughput measured just now, each the median of three runs (a
# single run can fall on a stall of the machine); a different machine (or batch size) moves them,
# which is the subject of the last chapters.
#
# ## The map of the package
#
# Every chapter points at the file it explains. Here is the package, read from its own docstrings:

# %%
import importlib
from pathlib import Path

for name in ["sampling", "cache", "model", "generate", "rejection", "exact", "speculative", "draft_length",
             "costmodel", "attention.naive", "attention.padded", "attention.split", "attention.ragged", "oracle"]:
    module = importlib.import_module(f"minibass.{name}")
    path = Path(module.__file__).relative_to(Path(minibass.__file__).parent.parent).as_posix()
    print(path.replace("__init__.py", "").ljust(34), (module.__doc__ or "").strip().splitlines()[0])

# %% [markdown]
# ## CPU or GPU?
#
# Everything here runs on a laptop CPU: the Triton kernel of chapter 07 runs in Triton's
# interpreter, and the timings are this machine's. On a CPU the small demo models cost mostly
# per-layer overhead, so the target/draft *cost ratio* is what decides whether speculation pays;
# on a GPU a large model is bound by memory bandwidth, and the batch size is what decides. Chapter
# 10 shows the GPU timings recorded in `bench_results/*-cuda.json` with their provenance (or says
# that none were recorded), measures live as well where a GPU is present, and in every case plots
# the cost model's *prediction*, labelled as one.
#
# | chapter | question |
# |---|---|
# | 01 | Why is decoding memory-bound, and why does batching change that? |
# | 02 | What does the KV cache save, and how are ragged prompts packed? |
# | 03 | Why is speculative sampling exact? |
# | 04 | How do the known bugs break it, and how do the tests catch them? |
# | 05 | Why do the caches go ragged, and why is rollback free? |
# | 06 | What do naive, BASS-PAD and BASS-SPLIT cost? |
# | 07 | How does one ragged Triton launch work? |
# | 08 | How does the batched loop run end to end? |
# | 09 | How long should the draft be? |
# | 10 | Where do the speed-ups come from? |
# | 11 | How do I check my own engine? |
