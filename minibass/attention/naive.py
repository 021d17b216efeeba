"""The executable specification of ragged attention: loops, explicit scores, mask and softmax.

Slow on purpose and obviously right. Every other backend is tested against this one.

Cost: the same useful FLOPs as any exact method (see ``cost``), but B * H Python-level
iterations, each a few tiny kernel launches; nothing is padded.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import AttentionMetadata, check_inputs


def naive(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
          *, scale: float | None = None) -> Tensor:
    """Reference ragged attention (checked entry point). Shapes: see ``minibass.attention.base``."""
    meta, scale = check_inputs(q, k_cache, v_cache, q_lens, kv_lens, scale)
    return naive_forward(q, k_cache, v_cache, meta, scale)


def naive_forward(q: Tensor, k_cache: Tensor, v_cache: Tensor, meta: AttentionMetadata, scale: float) -> Tensor:
    """The specification itself, on already-checked inputs; loop bounds come from the host lengths."""
    n_heads, n_kv_heads = q.shape[1], k_cache.shape[1]
    group = n_heads // n_kv_heads  # query heads per kv head
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty_like(q)
    for b, (start, n_q, n_kv) in enumerate(zip(meta.host_q_starts, meta.host_q_lens, meta.host_kv_lens)):
        # sequence b's queries are rows start .. start + n_q of q
        for h in range(n_heads):
            qh = q[start:start + n_q, h].to(acc_dtype)  # (n_q, D)
            kh = k_cache[b, h // group, :n_kv].to(acc_dtype)  # (n_kv, D)
            vh = v_cache[b, h // group, :n_kv].to(acc_dtype)  # (n_kv, D)
            scores = (qh @ kh.T) * scale  # (n_q, n_kv)
            q_pos = (n_kv - n_q) + torch.arange(n_q, device=q.device)  # absolute positions of the queries
            k_pos = torch.arange(n_kv, device=q.device)
            causal = k_pos[None, :] <= q_pos[:, None]  # (n_q, n_kv)
            scores = scores.masked_fill(~causal, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # every row keeps at least key 0, so no NaN
            out[start:start + n_q, h] = (weights @ vh).to(q.dtype)  # (n_q, D)
    return out
