"""The one signature every attention backend shares, the per-step metadata, and the input checks.

Public signature, checked on every call:

    out = backend(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None)

    q        [total_q, H, D]   new queries of all sequences, packed in sequence order
    k_cache  [B, Hk, C, D]     sequence b owns positions [0, kv_lens[b]); the rest may be garbage,
                               and a backend may overwrite it (``padded`` zeroes stale V slots)
    v_cache  [B, Hk, C, D]
    q_lens   int [B]           new tokens per sequence (0 = idle this step), q_lens <= kv_lens
    kv_lens  int [B]           valid cache length per sequence, kv_lens <= C
    scale    float or None     softmax scale (finite), default D ** -0.5
    returns  [total_q, H, D]   in q's dtype: float16, bfloat16, float32 or float64, shared by q, k_cache, v_cache

Query i of sequence b sits at absolute position kv_lens[b] - q_lens[b] + i and attends to keys
0 ..= that position (causal, aligned to the bottom right). Query head h reads kv head
h // (H // Hk) (grouped-query attention).

The hot path. Every backend is two functions: the public one above validates its arguments
(which reads device values, so on a GPU it synchronises) and then calls its ``*_forward``
twin with an ``AttentionMetadata``. The decoder builds that metadata once per step, from
lengths it keeps on the host, and calls ``*_forward`` in every layer: no layer re-validates,
and no layer reads a device value into Python (host values such as ``max_kv_len`` travel in
the metadata).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import torch
from torch import Tensor

from ..cache import pack_lists


DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what every backend computes in


class AttentionFn(Protocol):
    def __call__(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
                 *, scale: float | None = None) -> Tensor: ...


@dataclass(frozen=True)
class AttentionMetadata:
    """One step's ragged layout, computed once and shared by every layer.

    Device tensors (on the device of q and the cache):
        q_lens, kv_lens, q_starts  long [B]   q_starts = exclusive prefix sum of q_lens
        seq_ids                    long [N]   the sequence of each packed query
        offsets                    long [N]   each query's index among its sequence's new tokens
        positions                  long [N]   each query's absolute position: kv_lens - q_lens + offset
    Host values (plain Python, so that no layer has to read the device):
        host_q_lens, host_kv_lens, host_q_starts   list[int] [B]
        max_q_len, max_kv_len                       int
    Tables a backend may need, built on first use and then shared by every layer:
        causal_mask, hidden (its complement)        bool [B, Tq, Tk]
        stale_slots                                 (long [S], long [S])
    """

    q_lens: Tensor
    kv_lens: Tensor
    q_starts: Tensor
    seq_ids: Tensor
    offsets: Tensor
    positions: Tensor
    host_q_lens: list[int]
    host_kv_lens: list[int]
    host_q_starts: list[int]
    max_q_len: int
    max_kv_len: int

    @classmethod
    def build(cls, q_lens: Tensor, kv_lens: Tensor, device: torch.device | str) -> "AttentionMetadata":
        """From host (CPU) lengths q_lens, kv_lens long [B]; one host-to-device copy for all tensors."""
        host_q, host_kv = q_lens.tolist(), kv_lens.tolist()
        # The new tokens are the last q_lens[b] of the kv_lens[b] cached ones.
        seq_ids, q_starts, offsets, positions = pack_lists(host_q, [kv - n for n, kv in zip(host_q, host_kv)])
        batch, total = len(host_q), len(seq_ids)
        # One transfer: asynchronous from pageable memory, so it never stalls the host on a GPU.
        packed = torch.tensor(host_q + host_kv + q_starts + seq_ids + offsets + positions, dtype=torch.long)
        packed = packed.to(device, non_blocking=True)
        dev_q_lens, dev_kv_lens, dev_q_starts, dev_seq, dev_off, dev_pos = packed.split([batch] * 3 + [total] * 3)
        return cls(dev_q_lens, dev_kv_lens, dev_q_starts, dev_seq, dev_off, dev_pos, host_q, host_kv,
                   q_starts, max(host_q, default=0), max(host_kv, default=0))

    @cached_property
    def causal_mask(self) -> Tensor:
        """bool [B, Tq, Tk] (Tq = max_q_len, Tk = max_kv_len): may query t of sequence b see key j?

        Yes iff j < kv_lens[b] and j <= kv_lens[b] - q_lens[b] + t (bottom-right causal). Rows
        t >= q_lens[b] are padding. ``mask[b, :q_lens[b], :kv_lens[b]]`` is sequence b's own mask.
        """
        keys = torch.arange(self.max_kv_len, device=self.kv_lens.device)  # (Tk,)
        q_pos = (self.kv_lens - self.q_lens)[:, None] + torch.arange(self.max_q_len, device=keys.device)  # (B, Tq)
        return (keys[None, None, :] <= q_pos[:, :, None]) & (keys < self.kv_lens[:, None])[:, None, :]

    @cached_property
    def hidden(self) -> Tensor:
        """bool [B, Tq, Tk]: ``~causal_mask``, the keys each query must not see (built once per step)."""
        return ~self.causal_mask

    @cached_property
    def has_stale_slots(self) -> bool:
        """Whether any sequence is shorter than ``max_kv_len`` (from the host lengths: no tensor work)."""
        return min(self.host_kv_lens, default=self.max_kv_len) < self.max_kv_len

    @cached_property
    def stale_slots(self) -> tuple[Tensor, Tensor]:
        """(seq, slot) long [S]: every cache slot below max_kv_len that lies beyond its sequence's
        kv_lens — what a padded read of the cache sees but must ignore (it may hold NaN)."""
        stale = torch.arange(self.max_kv_len)[None, :] >= torch.tensor(self.host_kv_lens)[:, None]  # (B, Tk), host
        seq, slot = stale.nonzero(as_tuple=True)  # (S,), (S,): on the host, so no device sync
        return seq.to(self.kv_lens.device, non_blocking=True), slot.to(self.kv_lens.device, non_blocking=True)


def check_inputs(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
                 scale: float | None) -> tuple[AttentionMetadata, float]:
    """Validates the public signature; returns (the step's metadata, the softmax scale).

    Raises ValueError naming the argument. Reads the lengths on the host (a sync on a GPU):
    this runs at the public boundary, never inside the decoder's layers.
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
    if q.dtype not in DTYPES or q.dtype != k_cache.dtype or q.dtype != v_cache.dtype:
        raise ValueError(f"q, k_cache, v_cache must share one dtype, one of float16, bfloat16, float32 or float64, "
                         f"got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    batch, n_kv_heads, capacity, head_dim = k_cache.shape
    if head_dim == 0:
        raise ValueError(f"head_dim must be >= 1, got shape {tuple(k_cache.shape)}")
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
    host_q, host_kv = q_lens.cpu().long(), kv_lens.cpu().long()
    if (host_q < 0).any():
        raise ValueError(f"q_lens must be >= 0, got {host_q.tolist()}")
    if (host_q > host_kv).any():
        raise ValueError(f"q_lens must be <= kv_lens per sequence, got q_lens={host_q.tolist()} kv_lens={host_kv.tolist()}")
    if (host_kv > capacity).any():
        raise ValueError(f"kv_lens must be <= capacity ({capacity}), got {host_kv.tolist()}")
    if int(host_q.sum()) != total_q:
        raise ValueError(f"q has total_q={total_q} rows but q_lens sums to {int(host_q.sum())}")
    if scale is None:
        scale = head_dim ** -0.5
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite float or None, got {scale!r}")
    return AttentionMetadata.build(host_q, host_kv, q.device), float(scale)
