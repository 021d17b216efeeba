# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 11 · How do I check my own engine?
#
# Files: `minibass/oracle/` — `sampler.py` (`check_sampler`, `check_given_uniforms`),
# `generator.py` (`check_generator`), `attention.py` (`check_attention`), `adapters.py`
# (transformers), `cli.py` (`python -m minibass oracle ...`). The page `docs/oracle.md` has the
# full story and recipes for vLLM and SGLang.
#
# The oracle takes a part of another engine — an attention kernel, a rejection step (also with its
# uniforms given), or a whole generator — and returns a `Verdict`: one row per check (statistic,
# threshold, passed), `ok`, and the smallest failing case. Here it checks the installed
# `transformers`, live.

# %%
import numpy as np
import torch

from minibass import oracle
from minibass.course import size
from minibass.oracle import adapters

sampler_verdict = oracle.check_sampler(adapters.transformers_sampler, rows=size(5_000, 50_000))
print(sampler_verdict)

# %% [markdown]
# How close did each test come to failing? A row fails where its statistic passes its threshold,
# which a correct sampler passes only with probability alpha / 24 (the note's last line). Beside
# transformers, one of the oracle's planted bugs at the same size: `known_bugs.bonus_off_by_one`
# draws the bonus token (after every draft was accepted) from p_k instead of p_{k+1}:

# %%
import matplotlib.pyplot as plt

from minibass.oracle import known_bugs

buggy = oracle.check_sampler(known_bugs.bonus_off_by_one, rows=size(5_000, 50_000))
print(f"{buggy.subject}: {'PASS' if buggy.ok else 'FAIL'}, {len(buggy.failures())} of {len(buggy.checks)} rows failed")
tests = [c.name for c in sampler_verdict.checks if c.threshold > 0]  # the G-tests (the others: impossible events, exact invariants)
fig, ax = plt.subplots(figsize=(7, 6))
y = np.arange(len(tests))
for offset, (label, v) in enumerate([("transformers", sampler_verdict), ("bonus_off_by_one (planted)", buggy)]):
    rows = {c.name: c for c in v.checks}
    ratios = [max(rows[n].statistic / rows[n].threshold, 1e-3) for n in tests]  # 1e-3: a statistic of 0 on a log axis
    ax.barh(y + 0.4 * offset - 0.2, ratios, height=0.4, label=label)
ax.axvline(1, color="black", lw=1)
ax.set_xscale("log")
ax.set_yticks(y, tests, fontsize=7)
ax.invert_yaxis()
ax.set_xlabel("statistic / threshold (log scale; a row fails beyond 1)")
fig.legend(loc="lower center", ncol=2)
fig.tight_layout(rect=(0, 0.06, 1, 1))
plt.show()

# %% [markdown]
# The planted bug is far past the threshold on the joint rows and on the bonus token's marginal
# (under `zero_mass_q` the marginal needs more rows: inside the threshold at the tests' 5,000,
# six to seven times past it at a learner's 50,000). In the one-hot setup it is invisible: the target's
# greedy tokens at positions 3 and 4 are the same, so the wrong row gives the right token. It stays
# inside the threshold on the other rows, the emitted length included: the bug changes which token
# comes last, not how many. One more failing row, not drawn, counts impossible events: under top-k
# the wrong row can give a token that p_{k+1} has cut. Which rows fail says where to look.
#
# transformers' rejection step passes every distribution check at this size (the docs page reports
# 200,000 rows per setup). The oracle also probes the *edges* of the acceptance rule with given
# uniforms — `u = 0` when `p(x) = 0`, and the exact tie `u · q(x) = p(x)` — where the rule must be
# `accept iff u < p/q`:

# %%
import transformers

print(f"transformers {transformers.__version__}")
print(oracle.check_given_uniforms(adapters.transformers_given_uniforms))

# %% [markdown]
# Up to version 5.24 it fails there: transformers accepted when `u ≤ p/q`, so a draft token with
# `p(x) = 0` was accepted when `u` is exactly 0. Version 5.25 tests `u < p/q` and passes (the
# version is printed above the verdict). Leviathan et al.'s Algorithm 1 is written the `≤` way, and for a
# continuous uniform the two rules agree with probability 1; but real uniforms are discrete, drawn
# from [0, 1), and 0 comes up about once in 2²⁴ (float32) or 2⁵³ (float64) draws. Only `u < p/q`
# never accepts an impossible token: a rare deviation, which only a probe with given uniforms shows.
#
# ## A whole generator
#
# `check_generator` writes a tiny Llama target and draft (vocabulary 6) as Hugging Face folders,
# lets the engine under test load them and sample continuations, and tests the samples against the
# exact distribution of the first tokens, computed by enumeration from the same folders, and tests
# that they are independent draws (an engine seeding every batch alike returns the same samples
# again: the "repeated continuations" row).
# transformers' assisted generation, live, drafting 3 tokens a round (the adapter's default): its
# first bonus token can come at position 4, so the check looks at `n_tokens=4` tokens (with fewer,
# a bonus token drawn from the wrong row would go unseen; the verdict's last note says so). It runs at
# the default sampling, temperature 1 without top-k or top-p, where warping changes nothing: a note
# says that an engine that warps wrongly would pass here, and that a second run with warping
# (`sampling=minibass.SamplingParams(temperature=0.7, top_k=4, top_p=0.9)`) checks it.

# %%
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # no "Loading weights" bars for the oracle's two tiny models
generator_verdict = oracle.check_generator(adapters.transformers_generator, samples=size(600, 3_000), n_tokens=4)
print(generator_verdict)

# %% [markdown]
# ## Exercise
#
# Engines rarely have minibass's signature. Here is another engine's rejection step,
# `foreign_sampler(draft_tokens, q, p, rng)`: one sequence at a time, numpy in and out (`q [k, V]`,
# `p [k+1, V]`, a `numpy.random.Generator`), returning the emitted tokens (the accepted drafts,
# then one more). Write `wrap(foreign)`, returning a function with `rejection_sample`'s signature
# (`draft_tokens [B, k]`, `draft_probs [B, k, V]`, `target_probs [B, k+1, V]`, keyword `generator`)
# that calls `foreign` row by row and returns `num_accepted [B]` and `next_tokens [B]`. Seed the
# numpy generator with a number drawn from the torch `generator` (`torch.randint(..., generator=generator)`),
# so that the oracle's seed makes the run reproducible and each call moves the generator on: a loop
# calls the sampler every step, and must not get the same random numbers twice. The check wants the
# same tokens from equal seeds, other tokens from another seed and from a second call with one
# generator; then it runs the oracle on your adapter around `foreign_sampler` (must pass) and around
# its planted twin `foreign_sampler_buggy` (must fail).

# %%
import numpy as np
import torch

from minibass.course.checks import foreign_sampler


def wrap(foreign):
    # BEGIN SOLUTION
    def sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        rng = np.random.default_rng(seed)
        num_accepted, next_tokens = [], []
        for x, q, p in zip(draft_tokens.tolist(), draft_probs.double().numpy(), target_probs.double().numpy()):
            emitted = foreign(x, q, p, rng)
            num_accepted.append(len(emitted) - 1)
            next_tokens.append(emitted[-1])
        return torch.tensor(num_accepted), torch.tensor(next_tokens)
    return sampler
    # END SOLUTION


# %%
from minibass.course.checks import check_adapter

check_adapter(wrap)
