"""The per-sequence KV cache: fixed-capacity tensors plus a ``lengths`` vector.

For each layer, ``kv[layer]`` has shape [2, B, Hk, C, D]: keys ``kv[layer][0]`` and values
``kv[layer][1]``, in one tensor so that a step writes both with one scatter. Sequence ``b`` owns
positions ``[0, lengths[b])``; anything at or beyond ``lengths[b]`` is garbage that attention
never reads. That makes rollback free: ``truncate`` only lowers ``lengths``, and the next
append overwrites the stale slots. This is the ragged cache of BASS: after a speculative step
every sequence can have a different length.

``lengths`` lives on the host (CPU) whatever the device of ``kv``: the decoder needs
the values every step (positions, the longest cache), and reading them from a GPU would stall it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def pack_lists(q_lens: list[int], lengths: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Where the packed new tokens of one step go, on Python lists (a handful of integers per
    sequence, where tiny tensor ops would cost more than the numbers).

    q_lens[b] new tokens for sequence b, which has lengths[b] tokens cached already. Returns
    seq_ids [N] (the sequence of each packed token), q_starts [B] (where each sequence's tokens
    start in the packed batch), offsets [N] (each token's index among its sequence's new tokens)
    and positions [N] (its absolute position: lengths[seq] + offset).
    """
    seq_ids, q_starts, offsets, positions = [], [], [], []
    for b, (n, cached) in enumerate(zip(q_lens, lengths, strict=True)):
        q_starts.append(len(seq_ids))
        seq_ids += [b] * n
        offsets += range(n)
        positions += range(cached, cached + n)
    return seq_ids, q_starts, offsets, positions


def pack_positions(q_lens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``pack_lists`` for host tensors: q_lens long [B] new tokens per sequence, lengths long [B]
    tokens already cached. Returns seq_ids long [N], q_starts long [B] and positions long [N].
    """
    seq_ids, q_starts, _, positions = pack_lists(q_lens.tolist(), lengths.tolist())
    return tuple(torch.tensor(xs, dtype=torch.long) for xs in (seq_ids, q_starts, positions))


def checked_truncation(lengths, current: Tensor) -> Tensor:
    """``lengths`` as a long tensor like ``current``, after checking 0 <= lengths <= current per sequence."""
    try:
        lengths = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"truncate: lengths must be integers, one per sequence, got {lengths!r:.80} ({e})") from None
    if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
        raise ValueError(f"truncate: lengths must be integers, got {lengths.dtype}: a fractional length is a bug "
                         "upstream, not something to round")
    lengths = lengths.long().to(current.device)
    if lengths.shape != current.shape:
        raise ValueError(f"truncate: lengths must have shape {tuple(current.shape)}, got {tuple(lengths.shape)}")
    # A few host integers: checked as Python lists, cheaper than tensor ops.
    new, old = lengths.tolist(), current.tolist()
    if any(not 0 <= n <= c for n, c in zip(new, old)):
        raise ValueError(f"truncate: lengths must be in [0, current] per sequence, got {new} with current {old}")
    return lengths.clone()


class KVCache:
    """kv: list over layers of [2, B, Hk, C, D] on ``device``; lengths: long [B] on the host."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, capacity: int, head_dim: int,
                 *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        if batch_size < 1 or capacity < 1:
            raise ValueError(f"batch_size and capacity must be >= 1, got {batch_size} and {capacity}")
        shape = (2, batch_size, n_kv_heads, capacity, head_dim)
        self.kv = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = torch.zeros(batch_size, dtype=torch.long)  # on the host, see the module docstring

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def capacity(self) -> int:
        return self.kv[0].shape[3] if self.kv else 0

    def truncate(self, lengths) -> None:
        """Rolls each sequence back to ``lengths[b]`` tokens (each <= its current length)."""
        self.lengths = checked_truncation(lengths, self.lengths)
