"""BASS-SPLIT: one attention call per sequence, each on that sequence's exact lengths.

For sequence b: Q_b [H, q_lens[b], D], K_b and V_b [Hk, kv_lens[b], D] sliced from the cache
(views, no copy), and ``scaled_dot_product_attention`` with a bottom-right causal mask. The G
query heads of a kv head read it through SDPA's ``enable_gqa`` (torch >= 2.5); older torch
gets K and V repeated G times.

Cost: exactly the useful FLOPs (nothing padded) but one launch (a few kernels) per active
sequence, so the launch overhead grows linearly with the batch, and each call is small —
which is why BASS-SPLIT loses at large batch sizes on a GPU.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import scaled_dot_product_attention

from .base import AttentionMetadata, check_inputs

SDPA_HAS_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


def split(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
          *, scale: float | None = None) -> Tensor:
    """Ragged attention as one SDPA call per sequence (checked entry point). Shapes: see ``minibass.attention.base``."""
    meta, scale = check_inputs(q, k_cache, v_cache, q_lens, kv_lens, scale)
    return split_forward(q, k_cache, v_cache, meta, scale)


def split_forward(q: Tensor, k_cache: Tensor, v_cache: Tensor, meta: AttentionMetadata, scale: float) -> Tensor:
    """BASS-SPLIT on already-checked inputs; the loop runs over the host lengths in ``meta``."""
    group = q.shape[1] // k_cache.shape[1]
    out = torch.empty_like(q)
    for b, (start, n_q, n_kv) in enumerate(zip(meta.host_q_starts, meta.host_q_lens, meta.host_kv_lens)):
        if n_q == 0:
            continue
        q_b = q[start:start + n_q].transpose(0, 1)  # (H, n_q, D)
        k_b, v_b = k_cache[b, :, :n_kv], v_cache[b, :, :n_kv]  # (Hk, n_kv, D) views
        if not SDPA_HAS_GQA:
            k_b, v_b = k_b.repeat_interleave(group, dim=0), v_b.repeat_interleave(group, dim=0)  # (H, n_kv, D)
        # Bottom-right causal: query i sits at position n_kv - n_q + i and sees keys 0..=that. One
        # query sees every key (no mask); a full prefill is SDPA's own (top-left) causal mask;
        # otherwise the step's mask, sliced to this sequence (a view).
        mask = None if n_q in (1, n_kv) else meta.causal_mask[b, :n_q, :n_kv]
        gqa = {"enable_gqa": True} if SDPA_HAS_GQA and group > 1 else {}
        o_b = scaled_dot_product_attention(q_b, k_b, v_b, attn_mask=mask, is_causal=1 < n_q == n_kv, scale=scale,
                                           **gqa)  # (H, n_q, D)
        out[start:start + n_q] = o_b.transpose(0, 1)
    return out
