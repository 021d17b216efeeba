# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 03 · Why is speculative sampling exact?
#
# Files: `minibass/rejection.py` (`rejection_sample`, `accept_and_resample`), `minibass/exact.py`.
#
# The draft proposes `x ~ q`. The target's distribution at the same position is `p`. Keep `x`
# with probability `min(1, p(x)/q(x))`; otherwise draw a replacement from the **residual**
#
# $$ r(y) = \frac{\max(0,\ p(y) - q(y))}{\sum_z \max(0,\ p(z) - q(z))} . $$
#
# (Leviathan et al. 2023, Algorithm 1 and Appendix A.1; Chen et al. 2023, Theorem 1.) The output
# is distributed exactly as `p`:
#
# $$ P(\text{out} = y) = \underbrace{q(y)\min\!\left(1, \tfrac{p(y)}{q(y)}\right)}_{\min(p(y),\,q(y))}
#    + \underbrace{\Big(1 - \sum_z \min(p(z), q(z))\Big)}_{\sum_z \max(0,\,p(z)-q(z))} r(y)
#    = \min(p(y), q(y)) + \max(0, p(y) - q(y)) = p(y). $$
#
# With `k` drafts the rule runs position after position and stops at the first rejection; if all
# `k` are accepted, one more token comes from the target's `p_{k+1}` (the bonus token).
#
# Change `p` and `q` below and rerun the cells (plain values: no widget library is needed).

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from minibass.course import size
from minibass.rejection import rejection_sample

p = torch.tensor([0.40, 0.30, 0.20, 0.10], dtype=torch.float64)  # the target at this position
q = torch.tensor([0.10, 0.20, 0.30, 0.40], dtype=torch.float64)  # the draft at this position

V = len(p)  # the vocabulary: any size, as long as p and q match
overlap = torch.minimum(p, q)  # kept drafts, per token
residual_mass = (p - q).clamp(min=0)  # what the residual must add back
# the residual, normalised; when p == q nothing is ever rejected and there is no residual to draw from
r = residual_mass / residual_mass.sum() if residual_mass.sum() > 0 else torch.zeros_like(p)
out = overlap + (1 - overlap.sum()) * r
print("min(p, q)      ", overlap.numpy().round(3), "  accepted with probability", round(float(overlap.sum()), 3))
print("max(0, p - q)  ", residual_mass.numpy().round(3))
print("output         ", out.numpy().round(3), "  equals p:", torch.allclose(out, p, atol=1e-15, rtol=0))

# %% [markdown]
# ## Sampled, row by row
#
# Now the real batched implementation, `rejection_sample`, with one draft token per row (k = 1):
# every row draws `x ~ q`, the function accepts or resamples (the legend gives the number of rows). The histogram of the first emitted
# token is compared with `p`.

# %%
rows = size(20_000, 100_000)
g = torch.Generator().manual_seed(0)
x = torch.multinomial(q.float().expand(rows, V), 1, replacement=True, generator=g)  # (rows, 1) drafts
num_accepted, next_tokens = rejection_sample(x, q.float().expand(rows, 1, V), p.float().expand(rows, 2, V), generator=g)
first = torch.where(num_accepted > 0, x[:, 0], next_tokens)  # the first emitted token of each row
freq = torch.bincount(first, minlength=V).double() / rows
fig, ax = plt.subplots(figsize=(6, 3.2))
w = 0.2
for i, (values, label) in enumerate([(q, "q (draft)"), (overlap, "min(p, q): kept"), (p, "p (target)"),
                                     (freq, f"emitted, {rows:,} rows")]):
    ax.bar(np.arange(V) + (i - 1.5) * w, values.numpy(), w, label=label)
ax.set_xticks(range(V), [f"token {t}" for t in range(V)])
ax.set_ylabel("probability")
ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12))
fig.tight_layout()
plt.show()
print("emitted frequencies", freq.numpy().round(4), " p", p.numpy())

# %% [markdown]
# What to see: the emitted bars match `p`, not `q`, even though every row started from a draft
# sampled from `q`: the rejected mass was put back exactly where `p` exceeds `q`.
#
# ## Exercise
#
# Write the single-position rule as two functions over float64 tensors `[V]` (compute in float64
# too: the bound below is 1e-12):
# `accept_probability(p, q, x)` (the probability of keeping draft token `x`) and
# `residual(p, q)` (the distribution to resample from after a rejection). The check enumerates the
# output distribution for many `(p, q)` (zeros included, and `p == q`) and requires its **total
# variation** from `p`, TV = ½ Σ_x |out(x) − p(x)| (the largest difference in probability the two
# give any set of tokens), to be at most 1e-12; then it samples 100,000 rows with your functions and
# runs a G-test, a goodness-of-fit test of the counts against `p` that chapter 04 explains.

# %%
import torch


def accept_probability(p, q, x):
    # BEGIN SOLUTION
    return min(1.0, float(p[x] / q[x]))
    # END SOLUTION


def residual(p, q):
    # BEGIN SOLUTION
    r = (p - q).clamp(min=0)
    return r / r.sum()
    # END SOLUTION


# %%
from minibass.course.checks import check_accept_resample

check_accept_resample(accept_probability, residual)
