"""The one signature every attention backend shares, and the input checks they all run.

    out = backend(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None)

    q        [total_q, H, D]   new queries of all sequences, packed in sequence order
    k_cache  [B, Hk, C, D]     sequence b owns positions [0, kv_lens[b]); the rest may be garbage
    v_cache  [B, Hk, C, D]
    q_lens   int [B]           new tokens per sequence (0 = idle this step), q_lens <= kv_lens
    kv_lens  int [B]           valid cache length per sequence, kv_lens <= C
    scale    float or None     softmax scale, default D ** -0.5
    q_starts int [B] or None   optional: exclusive prefix sum of q_lens (where each sequence's
                               queries start in q). The decoder computes it once per step and
                               shares it with every layer; a backend computes it when None.
    returns  [total_q, H, D]   in q's dtype

Query i of sequence b sits at absolute position kv_lens[b] - q_lens[b] + i and attends to keys
0 ..= that position (causal, aligned to the bottom right). Query head h reads kv head
h // (H // Hk) (grouped-query attention).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor


class AttentionFn(Protocol):
    def __call__(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
                 *, scale: float | None = None, q_starts: Tensor | None = None) -> Tensor: ...


def check_inputs(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
                 scale: float | None, q_starts: Tensor | None = None) -> tuple[float, Tensor]:
    """Validates the shared signature; returns (softmax scale, q_starts as long [B]).

    Raises ValueError naming the argument.
    """
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("q_lens", q_lens), ("kv_lens", kv_lens)):
        if not torch.is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3:
        raise ValueError(f"q must have shape [total_q, n_heads, head_dim], got rank {q.dim()} {tuple(q.shape)}")
    if k_cache.dim() != 4:
        raise ValueError(f"k_cache must have shape [batch, n_kv_heads, capacity, head_dim], got {tuple(k_cache.shape)}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} must equal k_cache shape {tuple(k_cache.shape)}")
    if not q.is_floating_point() or q.dtype != k_cache.dtype or q.dtype != v_cache.dtype:
        raise ValueError(f"q, k_cache, v_cache must share one floating dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    batch, n_kv_heads, capacity, head_dim = k_cache.shape
    total_q, n_heads, q_head_dim = q.shape
    if q_head_dim != head_dim:
        raise ValueError(f"q head_dim {q_head_dim} != k_cache head_dim {head_dim}")
    if n_kv_heads == 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"q n_heads ({n_heads}) must be a multiple of k_cache n_kv_heads ({n_kv_heads})")
    for name, t in (("q_lens", q_lens), ("kv_lens", kv_lens)):
        if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool or t.is_complex():
            raise ValueError(f"{name} must be a 1-D integer tensor [batch], got {t.dtype} {tuple(t.shape)}")
        if t.shape[0] != batch:
            raise ValueError(f"{name} has {t.shape[0]} entries but k_cache has batch {batch}")
    devices = {t.device for t in (q, k_cache, v_cache, q_lens, kv_lens)}
    if len(devices) != 1:
        raise ValueError(f"q, k_cache, v_cache, q_lens, kv_lens must be on one device, got {sorted(map(str, devices))}")
    if batch and (q_lens < 0).any():
        raise ValueError(f"q_lens must be >= 0, got {q_lens.tolist()}")
    if batch and (q_lens > kv_lens).any():
        raise ValueError(f"q_lens must be <= kv_lens per sequence, got q_lens={q_lens.tolist()} kv_lens={kv_lens.tolist()}")
    if batch and (kv_lens > capacity).any():
        raise ValueError(f"kv_lens must be <= capacity ({capacity}), got {kv_lens.tolist()}")
    if int(q_lens.sum()) != total_q:
        raise ValueError(f"q has total_q={total_q} rows but q_lens sums to {int(q_lens.sum())}")
    if q_starts is None:
        q_starts = torch.cumsum(q_lens, 0) - q_lens
    elif not torch.is_tensor(q_starts) or q_starts.shape != q_lens.shape or q_starts.device != q_lens.device:
        raise ValueError(f"q_starts must be an integer tensor shaped like q_lens ({tuple(q_lens.shape)}) on its device")
    if scale is None:
        scale = head_dim ** -0.5
    elif not isinstance(scale, (int, float)) or not scale == scale:
        raise ValueError(f"scale must be a float or None, got {scale!r}")
    return float(scale), q_starts.long()
