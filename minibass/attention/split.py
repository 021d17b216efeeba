"""BASS-SPLIT: one attention call per sequence, each on that sequence's exact lengths.

For sequence b: Q_b [H, q_lens[b], D], K_b and V_b [Hk, kv_lens[b], D] sliced from the cache
(views, no copy), and ``scaled_dot_product_attention`` with a bottom-right causal mask.

Cost: exactly the useful FLOPs (nothing padded) but one launch (a few kernels) per active
sequence, so the launch overhead grows linearly with the batch, and each call is small —
which is why BASS-SPLIT loses at large batch sizes on a GPU.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import scaled_dot_product_attention

from .base import check_inputs


def split(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
          *, scale: float | None = None, q_starts: Tensor | None = None) -> Tensor:
    """Ragged attention as one SDPA call per sequence. Shapes: see ``minibass.attention.base``."""
    scale, q_starts = check_inputs(q, k_cache, v_cache, q_lens, kv_lens, scale, q_starts)
    group = q.shape[1] // k_cache.shape[1]
    out = torch.empty_like(q)
    for b, (start, n_q, n_kv) in enumerate(zip(q_starts.tolist(), q_lens.tolist(), kv_lens.tolist())):
        if n_q == 0:
            continue
        q_b = q[start:start + n_q].transpose(0, 1)  # (H, n_q, D)
        k_b = k_cache[b, :, :n_kv].repeat_interleave(group, dim=0)  # (H, n_kv, D)
        v_b = v_cache[b, :, :n_kv].repeat_interleave(group, dim=0)  # (H, n_kv, D)
        # Bottom-right causal: query i sits at position n_kv - n_q + i and sees keys 0..=that.
        allowed = torch.ones(n_q, n_kv, dtype=torch.bool, device=q.device).tril(diagonal=n_kv - n_q)  # (n_q, n_kv)
        o_b = scaled_dot_product_attention(q_b, k_b, v_b, attn_mask=allowed, scale=scale)  # (H, n_q, D)
        out[start:start + n_q] = o_b.transpose(0, 1)
    return out
