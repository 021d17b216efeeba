"""What attention over a ragged batch costs, useful versus actually done, per strategy.

For sequence b with n_q = q_lens[b] new queries over n_kv = kv_lens[b] keys, causal
(bottom-right), query i sees ``n_kv - n_q + i + 1`` keys. Useful FLOPs, counting a
multiply-add as 2, for QK^T and PV together:

    useful = sum_b  4 * H * D * sum_i (n_kv - n_q + i + 1)

What each strategy computes:

    naive / split  every (query, key) pair of the sequence's own rectangle n_q x n_kv
                   (the causal triangle is masked, not skipped): 4 H D n_q n_kv per sequence
    padded         the batch rectangle for everyone: 4 H D B max(n_q) max(n_kv)
    ragged         the rectangle up to the last visible key, in tiles: the causal part of
                   partial tiles is computed and masked (counted here at tile granularity,
                   with the kernel's own tile sizes, ``ragged.tile_sizes``)

Bytes are the minimum traffic of each strategy: Q and O once; K and V for the keys it reads, once
per kv head for ``ragged`` and PAD (which reads the padded rectangle), and once per query head for
``naive`` and ``split``, which hand every query head its own copy of its kv head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .ragged import tile_sizes


@dataclass(frozen=True)
class Cost:
    """What attention over one ragged batch costs: the FLOPs it needs, and per strategy ("naive", "padded",
    "split", "ragged") the FLOPs it computes, the bytes it must touch and its launches per layer."""

    useful_flops: int  # what exact causal attention needs
    flops: dict[str, int]  # what each strategy computes
    bytes: dict[str, int]  # the memory each strategy must touch at least
    launches: dict[str, int]  # kernel launches (attention calls) per layer

    def waste(self, name: str) -> float:
        """Computed FLOPs / useful FLOPs (1.0 = no waste)."""
        return self.flops[name] / self.useful_flops if self.useful_flops else 1.0


def cost(q_lens, kv_lens, *, n_heads: int = 32, n_kv_heads: int | None = None, head_dim: int = 128,
         bytes_per_element: int = 2, block_m: int | None = None, block_n: int | None = None) -> Cost:
    """Useful and actual attention work for one layer of a ragged batch (lengths as lists or tensors).

    ``block_m``, ``block_n``: the ragged kernel's tile of (query, head) rows by keys; by default the
    sizes the kernel picks for this batch and ``bytes_per_element`` (``ragged.tile_sizes``), with the head
    dim padded as it pads it."""
    q_lens = [int(x) for x in torch.as_tensor(q_lens).tolist()]
    kv_lens = [int(x) for x in torch.as_tensor(kv_lens).tolist()]
    if len(q_lens) != len(kv_lens) or any(q < 0 or q > kv for q, kv in zip(q_lens, kv_lens)):
        raise ValueError(f"need 0 <= q_lens <= kv_lens per sequence, got {q_lens} and {kv_lens}")
    n_kv_heads = n_kv_heads or n_heads
    h, d, e = n_heads, head_dim, bytes_per_element
    group = n_heads // n_kv_heads
    tile_m, tile_n, tile_d = tile_sizes(max(q_lens, default=0), group, head_dim, bytes_per_element)
    block_m = tile_m if block_m is None else block_m
    block_n = tile_n if block_n is None else block_n
    if block_m < 1 or block_n < 1:
        raise ValueError(f"block_m and block_n must be >= 1, got {block_m} and {block_n}")
    active = [(q, kv) for q, kv in zip(q_lens, kv_lens) if q > 0]
    useful = sum(4 * h * d * (q * (kv - q) + q * (q + 1) // 2) for q, kv in active)
    rect = sum(4 * h * d * q * kv for q, kv in active)
    tq, tk = max(q_lens, default=0), max(kv_lens, default=0)
    padded = 4 * h * d * len(q_lens) * tq * tk

    ragged = 0
    for q, kv in active:  # tile by tile, as the kernel loops
        rows = q * group
        for m0 in range(0, rows, block_m):
            last_query = min(m0 + block_m, rows) - 1
            visible = kv - q + last_query // group + 1
            ragged += 4 * tile_d * n_kv_heads * block_m * (-(-visible // block_n) * block_n)
    qo_bytes = 2 * sum(q_lens) * h * d * e
    kv_bytes = 2 * n_kv_heads * d * e * sum(kv for _, kv in active)
    return Cost(
        useful_flops=useful,
        flops={"naive": rect, "split": rect, "padded": padded, "ragged": ragged},
        bytes={"naive": qo_bytes + kv_bytes * group, "split": qo_bytes + kv_bytes * group,
               "padded": 2 * len(q_lens) * tq * h * d * e + 2 * n_kv_heads * d * e * len(q_lens) * tk,
               "ragged": qo_bytes + kv_bytes},
        launches={"naive": len(active) * h, "split": len(active), "padded": 1, "ragged": 1},
    )
