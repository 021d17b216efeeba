# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 08 · How does the batched loop run end to end?
#
# File: `minibass/speculative.py` — read `step` (one screen) and `speculative_generate` (the loop).
#
# One step, for the active sequences of the batch:
#
# 1. **draft** — the draft catches up on the tokens it has not seen, then proposes `x_1 … x_k ~ q`;
# 2. **verify** — one target call over `[last token, x_1 … x_k]` gives `p_1 … p_{k+1}`;
# 3. **accept** — the rejection rule (`accept_and_resample`, the core of `rejection_sample`; greedy
#    decoding compares tokens instead): keep `x_1 … x_n`, then `y` from `norm(max(0, p − q))` or `p_{k+1}`;
# 4. **emit** — append `x_1 … x_n, y` to each sequence, cut at EOS;
# 5. **roll back** — both caches keep what the new history confirms (chapter 05).
#
# The phases are plain functions gathered in `Phases`; `speculative_generate(..., step=...)` takes
# the function that strings them together, which is the exercise below.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minibass
from minibass import zoo
from minibass.course import size

target, draft, tokenizer = zoo.load_demo_pair()
prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(size(4, 8))]
greedy = minibass.SamplingParams(temperature=0.0)
regular = minibass.generate(target, prompts, size(24, 48), sampling=greedy)
spec = minibass.speculative_generate(target, draft, prompts, size(24, 48), sampling=greedy, draft_length=4)
print("greedy speculative == greedy regular:", spec.tokens == regular.tokens)
assert spec.tokens == regular.tokens

# %% [markdown]
# ## Where the time goes
#
# `stats.time_split` holds the seconds spent in each phase (sampled run, temperature 1):

# %%
run = minibass.speculative_generate(target, draft, prompts, size(24, 48), draft_length=4, seed=0,
                                    sampling=minibass.SamplingParams(temperature=1.0))
split = run.stats.time_split
fig, ax = plt.subplots(figsize=(5.5, 2.6))
ax.barh(list(split), [1e3 * s for s in split.values()])
ax.set_xlabel("milliseconds in the whole run")
ax.set_title(f"{run.stats.steps} steps, batch {len(prompts)}, k = 4")
fig.tight_layout()
plt.show()
print({phase: f"{100 * s / sum(split.values()):.0f}%" for phase, s in split.items()})

# %% [markdown]
# What to see: the two model phases (draft: `k` small calls; verify: one big call) take nearly all
# the time; accepting and rolling back are bookkeeping.
#
# ## Acceptance per sequence per step

# %%
accepted = np.array(run.stats.accepted, dtype=float)  # [step, sequence], -1 = idle
accepted[accepted < 0] = np.nan
fig, ax = plt.subplots(figsize=(7, 2.8))
image = ax.imshow(accepted.T, aspect="auto", cmap="viridis", vmin=0, vmax=4, interpolation="nearest")
ax.set_xlabel("step")
ax.set_ylabel("sequence")
fig.colorbar(image, ax=ax, label="draft tokens accepted (of 4)")
fig.tight_layout()
plt.show()
print(f"acceptance rate {run.stats.acceptance_rate:.2f}, mean accepted per step {run.stats.mean_accepted:.2f}")

# %% [markdown]
# What to see: acceptance changes from sequence to sequence and from step to step (blank cells:
# sequences already done). The batch runs until its slowest sequence is done, so the columns on the
# right hold only a few active sequences.
#
# ## Exercise
#
# Assemble a step from the loop's parts. `step(s, target, draft, draft_lens, sampling, streams,
# attention, eos_token_id, phases, timer)` gets the loop's state `s` (`LoopState`: `history`,
# `seq_lens`, `active`, both caches) and must:
#
# 1. `drafts, q = phases.draft(draft, s.draft_cache, s.history, s.seq_lens, draft_lens, sampling, streams, attention)`
# 2. `p = phases.verify(target, s.target_cache, s.history, s.seq_lens, drafts, draft_lens, s.active, sampling, attention)`
# 3. `n, y = phases.accept(drafts, q, p, draft_lens, s.active, streams)`
# 4. `emit(s, drafts, n, y, eos_token_id)`, then `phases.rollback(s.target_cache, s.draft_cache, s.seq_lens)`
#
# and return `n`. Wrap each phase in `with timer("draft"):` (and `"verify"`, `"accept"`; step 4,
# both calls, in `"rollback"`): the four times add up in `stats.time_split`, and the loop hands the
# draft phase's time to the draft-length policy (the cost-aware one, chapter 09, prices a draft
# call with it).
# The check runs the real loop with your step: greedy equality with `generate`; with a fixed seed,
# the same sampled tokens as minibass's own step (built from the same phases, your step draws the
# same random numbers); all four phases timed; the `n` your step returns against minibass's own
# step's (`stats.accepted`); and a G-test of sampled outputs against the exact distribution. (It refuses
# `minibass.speculative.step` itself: assemble your own.)

# %%
from minibass.speculative import emit


def my_step(s, target, draft, draft_lens, sampling, streams, attention, eos_token_id, phases, timer):
    # BEGIN SOLUTION
    with timer("draft"):
        drafts, q = phases.draft(draft, s.draft_cache, s.history, s.seq_lens, draft_lens, sampling, streams,
                                 attention)
    with timer("verify"):
        p = phases.verify(target, s.target_cache, s.history, s.seq_lens, drafts, draft_lens, s.active, sampling,
                          attention)
    with timer("accept"):
        n, y = phases.accept(drafts, q, p, draft_lens, s.active, streams)
    with timer("rollback"):
        emit(s, drafts, n, y, eos_token_id)
        phases.rollback(s.target_cache, s.draft_cache, s.seq_lens)
    return n
    # END SOLUTION


# %%
from minibass.course.checks import check_step

check_step(my_step)
