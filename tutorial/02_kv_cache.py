# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 02 · What does the KV cache save, and how are ragged prompts packed?
#
# Files: `minibass/cache.py` (`KVCache`, `pack_positions`), `minibass/model.py` (the decoder),
# `minibass/generate.py` (plain batched decoding).
#
# Attention at position `i` needs the keys and values of positions `0..i`. They never change once
# computed, so the decoder keeps them: the **KV cache**, one `[2, B, Hk, C, D]` tensor per layer
# (keys and values; `B` sequences, `Hk` kv heads, capacity `C`, head dim `D`; with grouped-query
# attention several query heads share one kv head, so `Hk ≤ H`, the number of query heads), plus
# `lengths [B]`:
# sequence `b` has `c = lengths[b]` tokens cached (lowercase `c`, at most the capacity `C`).
# A step then runs the weight matmuls for its `t` new tokens only, not for all `c + t` (attention
# still reads the `c` cached keys: `O(t (c + t))`).
#
# minibass never pads prompts. A step's new tokens are **packed**: all sequences' tokens one after
# the other, `q_lens[b]` of them for sequence `b`. Three small tables say where the packed tokens
# belong: each token's sequence (`seq_ids [N]`), where each sequence starts in the pack
# (`q_starts [B]`), and each token's absolute position in its sequence (`positions [N]`), which
# rotary embeddings and the causal mask need.

# %%
import time

import matplotlib.pyplot as plt
import torch

import minibass
from minibass import zoo
from minibass.cache import pack_positions
from minibass.course import size

q_lens, lengths = torch.tensor([3, 1, 0, 2]), torch.tensor([0, 5, 2, 9])  # a prefill, a decode, an idle, a verify
seq_ids, q_starts, positions = pack_positions(q_lens, lengths)
print("seq_ids  ", seq_ids.tolist())
print("q_starts ", q_starts.tolist())
print("positions", positions.tolist())

# %% [markdown]
# Sequence 0 (empty cache) gets positions 0, 1, 2; sequence 1 (5 cached) continues at 5; sequence
# 2 adds nothing this step; sequence 3 (9 cached) gets 9 and 10.
#
# ## With and without the cache, timed
#
# Without a cache, every step must run the whole sequence again (a fresh cache each time, fed the
# prompt and everything generated so far). With it, one token per step.

# %%
target, draft, tokenizer = zoo.load_demo_pair()
prompt = tokenizer.encode(zoo.demo_prompts(1)[0], add_special_tokens=False)
new = size(24, 64)


@torch.no_grad()
def decode_without_cache(model, prompt, n):
    tokens, times = list(prompt), []
    for _ in range(n):
        start = time.perf_counter()
        cache = model.init_cache(1, len(tokens) + 1)
        logits = model.forward(torch.tensor(tokens), torch.tensor([len(tokens)]), cache)  # everything again
        tokens.append(int(logits[-1].argmax()))
        times.append(time.perf_counter() - start)
    return tokens[len(prompt):], times


@torch.no_grad()
def decode_with_cache(model, prompt, n):
    cache, times = model.init_cache(1, len(prompt) + n), []
    logits = model.forward(torch.tensor(prompt), torch.tensor([len(prompt)]), cache)  # prefill once
    tokens = [int(logits[-1].argmax())]
    for _ in range(n - 1):
        start = time.perf_counter()
        logits = model.forward(torch.tensor(tokens[-1:]), torch.tensor([1]), cache)  # one new token
        tokens.append(int(logits[-1].argmax()))
        times.append(time.perf_counter() - start)
    return tokens, times


without, t_without = decode_without_cache(target, prompt, new)
with_cache, t_with = decode_with_cache(target, prompt, new)
assert without == with_cache, "the cache must not change the output"
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(range(len(prompt), len(prompt) + len(t_without)), [1e3 * t for t in t_without], label="without cache")
ax.plot(range(len(prompt) + 1, len(prompt) + 1 + len(t_with)), [1e3 * t for t in t_with], label="with cache")
ax.set_xlabel("sequence length before the step (tokens)")
ax.set_ylabel("time per generated token (ms)")
ax.legend()
fig.tight_layout()
plt.show()
print(f"mean ms per token: without cache {1e3 * sum(t_without) / len(t_without):.1f}, "
      f"with cache {1e3 * sum(t_with) / len(t_with):.1f}")

# %% [markdown]
# What to see: without the cache the cost per token grows with the length of the sequence (it is
# recomputed every step); with it, the cost stays nearly flat.
#
# ## Greedy output equals transformers
#
# minibass's decoder is its own code (`minibass/model.py`), loaded from the same Hugging Face
# folder. On ragged prompts, greedy decoding gives exactly the tokens `transformers` gives.

# %%
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # no "Loading weights" bar for a 10 M-parameter model
target_dir, _ = zoo.demo_paths()
hf = AutoModelForCausalLM.from_pretrained(target_dir).float().eval()  # float32, as minibass loads it
prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(size(3, 6))]
ours = minibass.generate(target, prompts, 16, sampling=minibass.SamplingParams(temperature=0.0)).tokens
for prompt_ids, mine in zip(prompts, ours):
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt_ids]), max_new_tokens=16, min_new_tokens=16, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)[0, len(prompt_ids):].tolist()  # no early stop
    print("equal" if theirs == mine else "DIFFERENT", repr(tokenizer.decode(mine))[:60])
    assert theirs == mine

# %% [markdown]
# ## Exercise
#
# Write `positions_of(q_lens, lengths)`: the absolute position of every packed token, a long
# tensor `[sum(q_lens)]`. Token `j` of sequence `b` in this step sits at `lengths[b] + j`.
# (`torch.repeat_interleave` and `torch.cumsum` help; a loop is fine too. The check compares your
# answer with `minibass.cache.pack_positions`, so write it without calling that.)

# %%
import torch


def positions_of(q_lens, lengths):
    # BEGIN SOLUTION
    return torch.cat([torch.arange(int(c), int(c) + int(q)) for q, c in zip(q_lens, lengths)]
                     + [torch.zeros(0, dtype=torch.long)]).long()
    # END SOLUTION


# %%
from minibass.course.checks import check_positions

check_positions(positions_of)
