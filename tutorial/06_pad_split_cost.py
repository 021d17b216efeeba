# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 06 · What do naive, BASS-PAD and BASS-SPLIT cost?
#
# Files: `minibass/attention/padded.py` (BASS-PAD), `naive.py` (the specification), `split.py`
# (BASS-SPLIT), `cost.py` (what each computes), `base.py` (the one signature they share).
#
# After a speculative step, sequence `b` has `q_b` new queries over `kv_b` cached keys, and the
# numbers differ per sequence. Query `i` of `b` sits at position `kv_b − q_b + i` and sees keys
# `0 … kv_b − q_b + i`. Useful work for `QKᵀ` and `PV` together, with `H` heads of dimension `D`:
#
# $$ \text{useful} = \sum_b 4 H D \sum_{i<q_b} (kv_b - q_b + i + 1). $$
#
# * **naive / BASS-SPLIT** compute each sequence's own rectangle `q_b × kv_b` (the causal
#   triangle masked): `4 H D Σ_b q_b kv_b`, but SPLIT launches one attention call per sequence.
# * **BASS-PAD** pads everything to the batch maxima: `4 H D · B · max q · max kv`, in one call.
# * **ragged** (chapter 07) computes tiles up to the last visible key, in one launch.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from minibass.attention import BACKENDS, cost
from minibass.course import size

q_lens, kv_lens = [5, 1, 3, 0, 2, 5, 4, 1], [40, 120, 75, 60, 300, 33, 90, 18]
c = cost(q_lens, kv_lens, n_heads=8, n_kv_heads=4, head_dim=64)
print(f"useful GFLOPs per layer: {c.useful_flops / 1e9:.4f}")
for name in ("naive", "split", "padded", "ragged"):
    print(f"{name:7s} computes {c.flops[name] / 1e9:.4f} GFLOPs ({c.waste(name):5.2f}x useful), "
          f"moves {c.bytes[name] / 1e6:6.2f} MB, {c.launches[name]:3d} attention launches per layer")

# %% [markdown]
# What to see: naive and split compute each sequence's rectangle of queries × keys (1.02×: only the
# masked causal corner is extra); PAD computes every sequence as long as the longest. The ragged
# kernel computes in tiles: a block of 16 rows of (query, head in the group) against blocks of 64
# keys, so a sequence with 1 to 5 queries still pays a whole block of 16 rows, and its last block
# of keys is rounded up to 64 — 4.3× here, on a GPU nearly free, since those tiles are read once and
# the work runs on tensor cores. What the kernel saves is bytes and launches: it reads each
# sequence's keys and values once, for all the heads of a group, in one launch.
#
# ## PAD's waste grows with the spread of lengths
#
# Eight sequences with mean cache length 256 and lengths spread evenly by ± `spread` (from
# 256 − spread to 256 + spread); each verifies 5 tokens:

# %%
spreads = np.linspace(0, 250, 11)
waste = []
for spread in spreads:
    kvs = (256 + np.linspace(-spread, spread, 8)).astype(int).tolist()
    waste.append(cost([5] * 8, kvs, n_heads=8, n_kv_heads=4, head_dim=64).waste("padded"))
fig, ax = plt.subplots(figsize=(5.5, 3.2))
ax.plot(spreads, waste, "o-")
ax.set_xlabel("spread of cache lengths around 256 (± tokens)")
ax.set_ylabel("PAD FLOPs / useful FLOPs")
fig.tight_layout()
plt.show()

# %% [markdown]
# What to see: with equal lengths PAD wastes almost nothing (only the masked causal triangle); as
# the batch goes ragged, its waste grows roughly as the longest cache over the mean one.
#
# ## Timed on this CPU
#
# The same ragged batch through each backend (`ragged` runs in Triton's interpreter on a CPU, so
# it is left out of timings here; chapter 07 runs it). The output of each is compared with the
# specification.

# %%
def ragged_batch(q_lens, kv_lens, heads=8, kv_heads=4, dim=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    capacity = max(kv_lens) + 8
    k = torch.randn(len(q_lens), kv_heads, capacity, dim, generator=g)
    v = torch.randn(len(q_lens), kv_heads, capacity, dim, generator=g)
    for b, kv in enumerate(kv_lens):  # stale slots hold garbage: NaN keys and inf values, as the check's
        k[b, :, kv:], v[b, :, kv:] = float("nan"), float("inf")
    q = torch.randn(sum(q_lens), heads, dim, generator=g)
    return q, k, v, torch.tensor(q_lens), torch.tensor(kv_lens)


inputs = ragged_batch(q_lens, kv_lens)
spec = BACKENDS["naive"](*(x.double() if x.is_floating_point() else x for x in inputs))
times = {}
for name in ("naive", "split", "padded"):
    fn = BACKENDS[name]
    fn(*[x.clone() for x in inputs])  # warm-up
    runs = []
    for _ in range(size(5, 20)):
        args = [x.clone() for x in inputs]
        start = time.perf_counter()
        out = fn(*args)
        runs.append(time.perf_counter() - start)
    times[name] = 1e3 * float(np.median(runs))
    print(f"{name:7s} {times[name]:7.3f} ms   max error vs float64 spec {float((out.double() - spec).abs().max()):.1e}")
fig, ax = plt.subplots(figsize=(5, 2.6))
ax.barh(list(times), list(times.values()))
ax.set_xlabel("time per attention call (ms, this CPU, median)")
fig.tight_layout()
plt.show()

# %% [markdown]
# What to see: which backend wins on this CPU for this batch (one batch, so expect noise). PAD
# does the most FLOPs but in the fewest operations (two batched matmuls); naive pays Python loops
# per sequence and head. The ranking changes with the batch's raggedness and the device
# (`bench attention`, on the Benchmarks page, `docs/benchmarks.md`, measures 36 cells).
#
# ## Exercise
#
# Write BASS-PAD: `padded_attention(q, k_cache, v_cache, q_lens, kv_lens)` with the signature of
# `minibass.attention` (`q [N, H, D]` packed in sequence order, caches `[B, Hk, C, D]`; query head
# `h` reads kv head `h // (H / Hk)`; query `i` of sequence `b` sits at position
# `kv_lens[b] − q_lens[b] + i` and sees keys up to that position). Scatter the queries into a
# zero-padded `[B, Tq, H, D]`, compute the scores against the first `Tk = max(kv_lens)` keys, mask
# padding and future keys to `−inf` **before** the softmax, and gather the valid rows back into
# `[N, H, D]`. Careful: the check fills stale cache slots with NaN (keys) and inf (values), and
# `0 · NaN = 0 · inf = NaN`: a masked weight of 0 does not clean them, so select the valid slots
# (`torch.where`) before the products. Scale the scores by the keyword `scale`, or by `D ** -0.5`
# when it is None (the check also passes an explicit one), and return the output in `q`'s dtype.
# Leave `q`, the lengths and the valid cache slots as they are (the check compares them
# afterwards; stale slots are yours to overwrite); a batch may bring no new token at all (`q` of
# shape `[0, H, D]`). The check compares with the specification, so write the padding
# yourself rather than calling `BACKENDS["padded"]`.

# %%
import torch


def padded_attention(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    # BEGIN SOLUTION
    batch, kv_heads, _, dim = k_cache.shape
    heads = q.shape[1]
    scale = dim ** -0.5 if scale is None else scale
    tq, tk = int(q_lens.max()), int(kv_lens.max())
    seq = torch.repeat_interleave(torch.arange(batch), q_lens)  # (N,) sequence of each packed query
    row = torch.arange(len(q)) - (torch.cumsum(q_lens, 0) - q_lens)[seq]  # (N,) its index within the sequence
    q_pad = q.new_zeros(batch, tq, heads, dim).double()
    q_pad[seq, row] = q.double()
    k = k_cache[:, :, :tk].double().repeat_interleave(heads // kv_heads, 1)  # (B, H, Tk, D)
    v = v_cache[:, :, :tk].double().repeat_interleave(heads // kv_heads, 1)
    key = torch.arange(tk)
    position = kv_lens[:, None] - q_lens[:, None] + torch.arange(tq)[None, :]  # (B, Tq) each query's position
    visible = (key[None, None, :] <= position[:, :, None]) & (key[None, None, :] < kv_lens[:, None, None])
    v = torch.where((key[None, :] < kv_lens[:, None])[:, None, :, None], v, 0)  # no NaN from stale slots
    scores = torch.einsum("bthd,bhkd->bhtk", q_pad, k) * scale
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    out = torch.einsum("bhtk,bhkd->bthd", torch.softmax(scores, -1).nan_to_num(0.0), v)  # (B, Tq, H, D)
    return out[seq, row].to(q.dtype)
    # END SOLUTION


# %%
from minibass.course.checks import check_padded_attention

check_padded_attention(padded_attention)
