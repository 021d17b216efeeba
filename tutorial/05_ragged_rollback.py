# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 05 · Why do the caches go ragged, and why is rollback free?
#
# Files: `minibass/speculative.py` (the loop and its invariants), `minibass/cache.py` (`truncate`).
#
# In one step, every active sequence `b` (with `m_b` tokens so far) drafts `k` tokens, the target
# verifies `k + 1` positions in one call, and the sequence keeps `n_b + 1` of them: its accepted
# prefix and one token from the target. `n_b` differs from sequence to sequence, so after the step
# the sequences — and their KV caches — have different lengths: they are **ragged**. The verify
# call wrote `k + 1` entries into each target cache; the ones past the accepted prefix are now
# wrong. Rolling them back costs nothing: `cache.truncate(lengths)` only lowers `lengths[b]`, and
# the next step overwrites the stale slots (attention never reads at or beyond `lengths[b]`; the
# attention chapters test that with NaN and inf in those slots).
#
# The loop's invariants between steps (`minibass/speculative.py`):
#
# * target cache: the first `m − 1` tokens of the sequence (the last one is fed at the next verify);
# * draft cache: a prefix `d < m` (it catches up on the rest before drafting).
#
# To watch the roll-back happen, the cell below hooks into the loop. `speculative_generate` runs
# each part of a step through a function it takes from `phases`, a `Phases` record (chapter 08
# builds a whole step from them); `rollback_phase` is the one that truncates the caches. Passing
# `phases=dataclasses.replace(Phases(), rollback=recording_rollback)` swaps in a wrapper that notes
# the target cache's lengths before and after calling it, and changes nothing else.

# %%
import dataclasses

import matplotlib.pyplot as plt
import numpy as np

import minibass
from minibass import zoo
from minibass.course import size
from minibass.speculative import Phases, rollback_phase

target, draft, tokenizer = zoo.load_demo_pair()
prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(4)]
trace = []  # per step: target cache lengths after verify, and after roll-back


def recording_rollback(target_cache, draft_cache, seq_lens):
    written = target_cache.lengths.clone()
    rollback_phase(target_cache, draft_cache, seq_lens)
    trace.append((written.tolist(), target_cache.lengths.tolist()))


result = minibass.speculative_generate(target, draft, prompts, size(16, 24), draft_length=4, seed=0,
                                       sampling=minibass.SamplingParams(temperature=1.0),
                                       phases=dataclasses.replace(Phases(), rollback=recording_rollback))
print("step  accepted per sequence   target cache: written -> kept")
for i, ((written, kept), accepted) in enumerate(zip(trace, result.stats.accepted)):
    print(f"{i:>4d}  {str(accepted):22s}  {written} -> {kept}")

# %% [markdown]
# `accepted` is `n_b` (−1 marks a sequence that had finished); each step the target cache of an
# active sequence grows by `k + 1 = 5` in the verify call (fewer near the token budget, nothing
# for a finished sequence) and then keeps `n_b + 1` of them. Drawn slot by slot for each
# sequence: valid slots, stale slots (written, then rolled back, still in memory until
# overwritten), and empty ones.

# %%
fig, axes = plt.subplots(1, len(prompts), figsize=(11, 3.2), sharey=True)
width = max(w for written, _ in trace for w in written)
colors = plt.matplotlib.colors.ListedColormap(["#eeeeee", "#f4a259", "#3b82c4"])  # empty, stale, valid
for b, ax in enumerate(axes):
    grid, high = np.zeros((len(trace), width)), 0
    for step, (written, kept) in enumerate(trace):
        high = max(high, written[b])
        grid[step, :high] = 1
        grid[step, :kept[b]] = 2
    ax.imshow(grid, aspect="auto", cmap=colors, vmin=0, vmax=2, interpolation="nearest")
    ax.set_title(f"sequence {b} (prompt {len(prompts[b])})", fontsize=9)
    ax.set_xlabel("cache slot (position)")
axes[0].set_ylabel("step")
handles = [plt.matplotlib.patches.Patch(color=colors(i), label=t) for i, t in enumerate(["empty", "stale", "valid"])]
fig.tight_layout(rect=(0, 0, 1, 0.9))  # room above the panels for the legend
fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=8)
plt.show()

# %% [markdown]
# What to see: blue (valid) grows by a different amount in each sequence at each step — the
# raggedness — and orange (stale) slots appear after every rejection and are overwritten later;
# no data was ever moved to roll back.
#
# ## Exercise
#
# A sequence has `m` tokens, so its target cache holds `target_len = m − 1`. It drafts `k` tokens
# (`k ≥ 1`; a sequence that drafts nothing takes a plain target step instead) and accepts `n` of
# them (`0 ≤ n ≤ k`). Write `kept_lengths(target_len, k, n)`, returning the
# lengths of the target cache and of the draft cache after roll-back. Hints: after the step the
# sequence has `m + n + 1` tokens; the draft was fed the catch-up tokens and then its own drafts
# `x_1 … x_{k−1}` (never `x_k`, which it sampled last), so its cache reached `m + k − 1`.

# %%
def kept_lengths(target_len, k, n):
    # BEGIN SOLUTION
    m = target_len + 1
    return m + n, min(m + k - 1, m + n)
    # END SOLUTION


# %%
from minibass.course.checks import check_kept_lengths

check_kept_lengths(kept_lengths)
