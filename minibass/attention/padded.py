"""BASS-PAD: pad every sequence to the batch maximum, then one batched QK^T and one batched PV.

This is what a framework without ragged kernels does after a speculative step: sequence ``b``
has ``q_lens[b]`` new queries and ``kv_lens[b]`` cached keys, and both are padded to the batch
maxima ``Tq = max(q_lens)``, ``Tk = max(kv_lens)``.

    Q  [B, Hk, G, Tq, D]   packed queries scattered into a zero-padded tensor (G = H // Hk)
    K  [B, Hk, 1, Tk, D]   the cache itself, sliced to Tk (no copy for GQA: broadcast over G)
    S  [B, Hk, G, Tq, Tk]  = Q K^T * scale, padding and future keys set to -inf *before* softmax
    P  = softmax(S)        padding gets weight exactly 0 (exp(-inf)); a zero-filled score would get e^0
    O  = P V               then the valid rows are gathered back into packed order

Cost: 2 * B * H * Tq * Tk * D FLOPs for each of QK^T and PV, however ragged the batch is —
the waste grows with the spread of the lengths (``cost()`` computes it). Two big batched
matmuls plus a handful of elementwise kernels, independent of B.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import check_inputs


def padded(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
           *, scale: float | None = None, q_starts: Tensor | None = None) -> Tensor:
    """Ragged attention computed on padded tensors. Shapes: see ``minibass.attention.base``."""
    scale, q_starts = check_inputs(q, k_cache, v_cache, q_lens, kv_lens, scale, q_starts)
    batch, n_kv_heads, _, head_dim = k_cache.shape
    total_q, n_heads, _ = q.shape
    group = n_heads // n_kv_heads
    if total_q == 0:
        return q.new_empty(q.shape)
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    q_lens, kv_lens = q_lens.long(), kv_lens.long()
    tq, tk = int(q_lens.max()), int(kv_lens.max())

    # Packed query r belongs to sequence seq[r] at offset off[r] within that sequence's new tokens.
    seq = torch.repeat_interleave(torch.arange(batch, device=q.device), q_lens)  # (total_q,)
    off = torch.arange(total_q, device=q.device) - q_starts[seq]  # (total_q,)
    q_pad = q.new_zeros(batch, tq, n_heads, head_dim)  # (B, Tq, H, D)
    q_pad[seq, off] = q
    q_pad = q_pad.view(batch, tq, n_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)  # (B, Hk, G, Tq, D)

    # Stale cache slots may hold NaN/inf. A NaN score is overwritten by the -inf mask below, but
    # the weight 0 of a padded key times a NaN value is still NaN, so padded values are zeroed.
    key_valid = torch.arange(tk, device=q.device)[None, :] < kv_lens[:, None]  # (B, Tk)
    k = k_cache[:, :, :tk].unsqueeze(2)  # (B, Hk, 1, Tk, D), a view: broadcast over the G query heads
    v = torch.where(key_valid[:, None, :, None], v_cache[:, :, :tk], 0).unsqueeze(2)  # (B, Hk, 1, Tk, D)

    scores = torch.matmul(q_pad.to(acc_dtype), k.to(acc_dtype).transpose(-1, -2)) * scale  # (B, Hk, G, Tq, Tk)
    q_pos = (kv_lens - q_lens)[:, None] + torch.arange(tq, device=q.device)[None, :]  # (B, Tq) absolute positions
    allowed = key_valid[:, None, :] & (torch.arange(tk, device=q.device)[None, None, :] <= q_pos[:, :, None])  # (B, Tq, Tk)
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    # A padding row of an idle, empty sequence has no allowed key: softmax gives NaN there; zero it.
    weights = torch.where(allowed.any(-1)[:, None, None, :, None], weights, 0)
    out = torch.matmul(weights, v.to(acc_dtype))  # (B, Hk, G, Tq, D)
    out = out.permute(0, 3, 1, 2, 4).reshape(batch, tq, n_heads, head_dim)  # (B, Tq, H, D)
    return out[seq, off].to(q.dtype)  # (total_q, H, D)
