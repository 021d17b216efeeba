# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 07 · How does one ragged Triton launch work?
#
# Files: `minibass/attention/ragged.py` (the launch: grid, block sizes), `ragged_kernel.py` (the
# kernel), `triton_shim.py` (the one place that touches Triton internals).
#
# One launch covers the whole ragged batch. The grid is `(B, Hk, row blocks)`: a program handles
# one sequence `b`, one kv head `hk`, and a block of `BLOCK_M` **rows**. With grouped-query
# attention (`G = H / Hk` query heads share a kv head), the rows of a kv head are the pairs
# (query `t`, head-in-group `g`), laid out as row `t·G + g`: every row of the block reads the same
# keys and values, which are loaded once per block and never copied per query head. A program
# whose rows are all past `q_len[b] · G` returns at once (an idle sequence costs a few programs that
# exit immediately, inside the same single launch).

# %%
import matplotlib.pyplot as plt
import torch

from minibass.attention import BACKENDS

G, q_len, H, Hk = 4, 3, 8, 2
print(f"H = {H} query heads, Hk = {Hk} kv heads, G = {G}; sequence with q_len = {q_len}")
for hk in range(Hk):
    rows = [f"row {t * G + g:2d}: query {t}, head {hk * G + g}" for t in range(q_len) for g in range(G)]
    print(f"kv head {hk}:", "; ".join(rows[:5]), "; ...")

# %% [markdown]
# ## The online softmax, block by block
#
# A program cannot hold a whole row of scores (the cache may be long), so it walks the keys in
# blocks of `BLOCK_N` and keeps three quantities per row (Milakov & Gimelshein 2018; Dao et al.
# 2022, FlashAttention): the running maximum `m_i`, the running sum `l_i = Σ exp(s − m_i)`, and
# the running output vector `acc = Σ exp(s − m_i) v` (`D` numbers). When a block raises the maximum, the old sums are
# rescaled by `α = exp(m_old − m_new)`:
#
# $$ m' = \max(m, \max_j s_j),\quad l' = \alpha\, l + \sum_j e^{s_j - m'},\quad
#    \text{acc}' = \alpha\, \text{acc} + \sum_j e^{s_j - m'} v_j,\qquad \text{out} = \text{acc} / l. $$
#
# Here it is for one row block of one sequence, printing the state after each key block — the same
# arithmetic the kernel does in `ragged_kernel.py` (its loop `for start_n in range(0, hi, BLOCK_N)`).
# One block's update is `update` below; writing it yourself is the exercise at the end, so it is
# imported here (`minibass.course.checks.online_softmax_reference` has it, in four lines).

# %%
g = torch.Generator().manual_seed(0)
D, kv_len, BLOCK_N = 16, 70, 16
q = torch.randn(4, D, generator=g, dtype=torch.float64)  # 4 rows
k, v = torch.randn(kv_len, D, generator=g, dtype=torch.float64), torch.randn(kv_len, D, generator=g, dtype=torch.float64)
scores = q @ k.T * D ** -0.5  # (4, kv_len), all keys visible here
from minibass.course.checks import online_softmax_reference as update

m_i, l_i, acc = torch.full((4,), float("-inf"), dtype=torch.float64), torch.zeros(4, dtype=torch.float64), torch.zeros(4, D, dtype=torch.float64)
for start in range(0, kv_len, BLOCK_N):
    s = scores[:, start:start + BLOCK_N]
    alpha = torch.exp(m_i - torch.maximum(m_i, s.max(1).values))  # the rescaling this block applies
    m_i, l_i, acc = update(m_i, l_i, acc, s, v[start:start + BLOCK_N])
    print(f"keys {start:2d}..{min(start + BLOCK_N, kv_len) - 1:2d}: m_i {m_i.numpy().round(3)}  "
          f"l_i {l_i.numpy().round(3)}  alpha {alpha.numpy().round(3)}")
print("max |acc / l - softmax(s) v| =", float((acc / l_i[:, None] - torch.softmax(scores, 1) @ v).abs().max()))

# %% [markdown]
# `alpha` is 0 on the first block (the old state was empty) and 1 whenever a block did not raise
# the maximum.
#
# ## The kernel itself, in Triton's interpreter
#
# On a CPU, minibass runs the very same kernel through Triton's interpreter (correct, slow). A
# ragged batch with an idle sequence, a prefill and NaN in the stale slots. Triton installs on Linux
# only: on macOS or Windows this cell says so and skips the launch (run the course under WSL, in a
# Linux container or in a hosted notebook to see it); the rest of the chapter needs no Triton.

# %%
from minibass.attention import triton_available

q_lens, kv_lens = torch.tensor([2, 0, 5, 1]), torch.tensor([40, 9, 5, 77])
k_cache = torch.randn(4, Hk, 96, 32, generator=g)
v_cache = torch.randn(4, Hk, 96, 32, generator=g)
for b, n in enumerate(kv_lens.tolist()):
    k_cache[b, :, n:], v_cache[b, :, n:] = float("nan"), float("inf")
queries = torch.randn(int(q_lens.sum()), H, 32, generator=g)
if not triton_available():
    print("Triton is not installed here (it installs on Linux only): the 'ragged' backend cannot run; "
          "the 'naive', 'padded' and 'split' backends, and the rest of this chapter, need no Triton.")
else:
    out = BACKENDS["ragged"](queries, k_cache.clone(), v_cache.clone(), q_lens, kv_lens)
    spec = BACKENDS["naive"](queries.double(), k_cache.double(), v_cache.double(), q_lens, kv_lens)
    errors = (out.double() - spec).abs().amax(dim=(1, 2))
    print("max error per packed query:", errors.numpy().round(8), " finite:", bool(torch.isfinite(out).all()))
    fig, ax = plt.subplots(figsize=(5.5, 2.8))
    ax.bar(range(len(errors)), errors.numpy())
    ax.set_xlabel("packed query (sequences 0, 2, 3; sequence 1 idle)")
    ax.set_ylabel("max |ragged − spec| (fp32)")
    fig.tight_layout()
    plt.show()

# %% [markdown]
# What to see: every query's error is at float32 rounding (around 1e-7) and nothing is NaN, though
# every stale slot holds NaN (keys) or inf (values): the kernel never reads past `kv_lens`.
#
# The interpreter checks the kernel's arithmetic, not its resources. It has no shared memory to
# run out of, and a GPU does: compiled on an H200, the kernel's 64-key tiles in float64 at head dim
# 128 asked for 287,232 bytes of shared memory, where the chip has 232,448, and every such launch
# failed. So `ragged.tile_sizes` now shrinks the tiles of wide dtypes (it takes the element size),
# and `tests/test_cuda.py`, which runs only on a GPU, compiles the kernel for every dtype.
#
# ## Exercise
#
# Write the rescaling step: `online_softmax_step(m_i, l_i, acc, scores, v)` takes the state
# (`m_i [M]`, `l_i [M]`, `acc [M, D]`) and one block (`scores [M, N]`, masked keys at `−inf`;
# `v [N, D]`) and returns the new `(m_i, l_i, acc)`. The check folds your step over random blocks,
# all float64 (keep them so: it allows an error of 1e-10), and compares `acc / l` with the whole
# softmax.

# %%
import torch


def online_softmax_step(m_i, l_i, acc, scores, v):
    # BEGIN SOLUTION
    m_new = torch.maximum(m_i, scores.max(1).values)
    alpha = torch.exp(m_i - m_new)
    p = torch.exp(scores - m_new[:, None])
    return m_new, alpha * l_i + p.sum(1), alpha[:, None] * acc + p @ v
    # END SOLUTION


# %%
from minibass.course.checks import check_online_softmax

check_online_softmax(online_softmax_step)
