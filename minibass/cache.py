"""The per-sequence KV cache: fixed-capacity tensors plus a ``lengths`` vector.

For each layer, ``k[layer]`` and ``v[layer]`` have shape [B, Hk, C, D]. Sequence ``b`` owns
positions ``[0, lengths[b])``; anything at or beyond ``lengths[b]`` is garbage that attention
never reads. That makes rollback free: ``truncate`` only lowers ``lengths``, and the next
append overwrites the stale slots. This is the ragged cache of BASS: after a speculative step
every sequence can have a different length.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """k, v: list over layers of [B, Hk, C, D]; lengths: long [B]."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, capacity: int, head_dim: int,
                 *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        if batch_size < 1 or capacity < 1:
            raise ValueError(f"batch_size and capacity must be >= 1, got {batch_size} and {capacity}")
        shape = (batch_size, n_kv_heads, capacity, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2] if self.k else 0

    def truncate(self, lengths) -> None:
        """Rolls each sequence back to ``lengths[b]`` tokens (each <= its current length)."""
        lengths = torch.as_tensor(lengths, device=self.lengths.device).long()
        if lengths.shape != self.lengths.shape:
            raise ValueError(f"truncate: lengths must have shape {tuple(self.lengths.shape)}, got {tuple(lengths.shape)}")
        if (lengths < 0).any() or (lengths > self.lengths).any():
            raise ValueError(f"truncate: lengths must be in [0, current] per sequence, "
                             f"got {lengths.tolist()} with current {self.lengths.tolist()}")
        self.lengths = lengths.clone()
