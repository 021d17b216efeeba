"""BASS-PAD: pad every sequence to the batch maximum, then one batched QK^T and one batched PV.

This is what a framework without ragged kernels does after a speculative step: sequence ``b``
has ``q_lens[b]`` new queries and ``kv_lens[b]`` cached keys, and both are padded to the batch
maxima ``Tq = max(q_lens)``, ``Tk = max(kv_lens)``.

The G = H / Hk query heads that share a kv head are folded into the rows (the layout the
ragged kernel uses too): row ``t * G + g`` is query ``t``, head ``hk * G + g``. Then K and V
are read once per kv head, never broadcast or copied per query head.

    Q  [B, Hk, Tq*G, D]    packed queries scattered into a zero-padded tensor
    K  [B, Hk, Tk, D]      the cache sliced to Tk: a view in float32/float64, a float32 copy in fp16/bf16
    S  [B, Hk, Tq*G, Tk]   = Q K^T * scale; padding and future keys set to -inf *before* softmax
    P  = softmax(S)        padding gets weight exactly 0 (exp(-inf)); a zero-filled score would get e^0
    O  = P V               then the valid rows are gathered back into packed order

S and P grow with Tq * Tk, which a long prefill makes large (8 prompts of 2,000 tokens, 32 heads: 4
GB of float32 scores). Where S would hold more than ``SCORE_ELEMENTS``, the queries are taken in
blocks of whole queries, one S and P per block: each row's softmax needs only its own keys, so
the result is the same, and a decode step is one block.

Side effect: the stale slots of ``v_cache`` below Tk (positions >= kv_lens[b], garbage by
contract) are overwritten with zeros, so that a NaN there cannot reach O through 0 * NaN;
copying V instead would cost a pass over it and, on a CPU, a fresh allocation every layer.
Where one memory location is several slots of ``v_cache`` (a cache broadcast with ``expand``,
e.g. one prompt's cache shared by the batch), a stale slot of one sequence may be a valid slot
of another: the checked entry point ``padded`` then works on a copy of V.

Cost: 2 * B * H * Tq * Tk * D FLOPs for each of QK^T and PV, however ragged the batch is —
the waste grows with the spread of the lengths (``cost()`` computes it). Two big batched
matmuls plus a handful of elementwise kernels, independent of B.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import AttentionMetadata, check_inputs

SCORE_ELEMENTS = 1 << 24  # the most scores held at once (64 MiB in float32); more: blocks of queries


def padded(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
           *, scale: float | None = None) -> Tensor:
    """Ragged attention computed on padded tensors (checked entry point). Shapes: see ``minibass.attention.base``."""
    meta, scale = check_inputs(q, k_cache, v_cache, q_lens, kv_lens, scale)
    if meta.has_stale_slots and _broadcast(v_cache):  # zeroing a stale slot would zero a shared valid one
        v_cache = v_cache[:, :, :meta.max_kv_len].contiguous()  # the slots PAD reads, each its own memory
    return padded_forward(q, k_cache, v_cache, meta, scale)


def _broadcast(t: Tensor) -> bool:
    """Whether a dimension of ``t`` longer than 1 has stride 0 (``expand``): one element in several places.
    (Other overlapping layouts, made with ``as_strided``, are not looked for.)"""
    return any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape))


def padded_forward(q: Tensor, k_cache: Tensor, v_cache: Tensor, meta: AttentionMetadata, scale: float) -> Tensor:
    """BASS-PAD on already-checked inputs; Tq and Tk come from the host maxima in ``meta``. Zeroes the stale
    slots of ``v_cache`` in place: give it a V whose slots are each their own memory (the decoder's cache is)."""
    batch, n_kv_heads, _, head_dim = k_cache.shape
    total_q, n_heads, _ = q.shape
    group = n_heads // n_kv_heads
    tq, tk = meta.max_q_len, meta.max_kv_len
    if total_q == 0:
        return q.new_empty(q.shape)
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32

    uniform = tq * batch == total_q  # every sequence has Tq queries (e.g. a decode step): nothing to pad
    if uniform:  # packed q already is [B, Tq, H, D]
        q_pad = q.view(batch, tq, n_kv_heads, group, head_dim).transpose(1, 2)  # (B, Hk, Tq, G, D)
    else:  # packed query n goes to row offsets[n] of its sequence, zeros elsewhere
        q_pad = q.new_zeros(batch, n_kv_heads, tq, group, head_dim)  # (B, Hk, Tq, G, D)
        q_pad[meta.seq_ids, :, meta.offsets] = q.view(total_q, n_kv_heads, group, head_dim)
    q_pad = q_pad.reshape(batch, n_kv_heads, tq * group, head_dim).to(acc_dtype)  # (B, Hk, Tq*G, D)

    k = k_cache[:, :, :tk].to(acc_dtype)  # (B, Hk, Tk, D), a view when no upcast is needed
    stale = meta.has_stale_slots  # cache slots below Tk beyond their sequence's kv_lens (a host fact)
    # Stale cache slots may hold NaN/inf: the weight 0 of a masked key times NaN is still NaN. They
    # hold garbage by contract, so they are overwritten with zeros in place: no copy of V.
    if stale:
        # The zero is a tensor on V's device: a Python 0 would be copied from the host, a GPU sync.
        stale_seq, stale_slot = meta.stale_slots  # (S,), (S,)
        v_cache[stale_seq, :, stale_slot] = v_cache.new_zeros(())
    v = v_cache[:, :, :tk].to(acc_dtype)  # (B, Hk, Tk, D), a view when no upcast is needed
    hidden = None if uniform and tq == 1 and not stale else meta.hidden  # None: one query sees all Tk keys
    per_block = query_block(batch, n_kv_heads, group, tk)
    if tq <= per_block:  # every step but a long prefill: all the queries in one block
        out = attend_block(q_pad, k, v, hidden, scale)  # (B, Hk, Tq*G, D)
    else:  # blocks of whole queries, so that the scores held at once stay within SCORE_ELEMENTS
        out = q_pad.new_empty(q_pad.shape)  # (B, Hk, Tq*G, D), each block written in place
        for t0 in range(0, tq, per_block):
            rows = slice(t0 * group, (t0 + per_block) * group)
            out[:, :, rows] = attend_block(q_pad[:, :, rows], k, v,
                                           None if hidden is None else hidden[:, t0:t0 + per_block], scale)
    out = out.view(batch, n_kv_heads, tq, group, head_dim)  # (B, Hk, Tq, G, D)
    out = out.transpose(1, 2) if uniform else out[meta.seq_ids, :, meta.offsets]  # (B, Tq, Hk, G, D) or (N, Hk, G, D)
    return out.reshape(total_q, n_heads, head_dim).to(q.dtype)  # (total_q, H, D)


def query_block(batch: int, n_kv_heads: int, group: int, tk: int) -> int:
    """How many queries a block takes: as many as keep its scores [B, Hk, rows * G, Tk] within
    ``SCORE_ELEMENTS``, at least one."""
    return max(1, SCORE_ELEMENTS // max(1, batch * n_kv_heads * group * tk))


def attend_block(q_rows: Tensor, k: Tensor, v: Tensor, hidden: Tensor | None, scale: float) -> Tensor:
    """softmax(Q K^T * scale) V for one block of padded queries.

    q_rows [B, Hk, T*G, D] (T queries, their G heads each), k and v [B, Hk, Tk, D], hidden [B, T, Tk]
    (True: the query does not see the key) or None (every query sees every key). Returns [B, Hk, T*G, D].
    """
    scores = torch.matmul(q_rows, k.transpose(-1, -2)).mul_(scale)  # (B, Hk, T*G, Tk), in place from here on
    if hidden is not None:  # the mask covers the G rows of each query through a view of the scores
        batch, n_kv_heads, _, tk = scores.shape
        scores.view(batch, n_kv_heads, hidden.shape[1], -1, tk).masked_fill_(hidden[:, None, :, None], float("-inf"))
    # Padding rows (past q_lens[b]) may see no key at all and come out NaN; they are never gathered.
    return torch.matmul(torch.softmax(scores, dim=-1), v)
