"""Ragged attention in one Triton kernel launch: no padding computed, no launch per sequence.

Motivation. After a speculative step each sequence has its own number of new queries
(``q_lens[b]``) and cached keys (``kv_lens[b]``). PAD wastes FLOPs on padding; SPLIT wastes
launches. This kernel reads the lengths itself: one program per (sequence b, kv head hk,
block of query rows), looping over exactly the keys that block may see.

Rows of a program. With grouped-query attention, the G = H / Hk query heads that share kv head
``hk`` read the same K and V, so a program stacks them: row r of the tile is query
``r // G`` of the sequence, query head ``hk * G + r % G``. A decode step (one query) with G = 4
already fills 4 rows of the tile, and K/V are loaded once for all G heads (GQA without copies).

Online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022). Over KV blocks
j = 1, 2, ... each row keeps a running max ``m_i``, normaliser ``l_i`` and output ``acc``:

    m_new = max(m_i, rowmax(S_j))
    P_j   = exp(S_j - m_new)
    l_i   = l_i * exp(m_i - m_new) + rowsum(P_j)
    acc   = acc * exp(m_i - m_new) + P_j V_j
    out   = acc / l_i                                 (after the last block)

Causality. Query i of sequence b sits at position ``kv_lens[b] - q_lens[b] + i``; a block
stops looping at the last key its last row may see, and masks the rest to -inf. Keys at or
beyond ``kv_lens[b]`` are never loaded (masked loads), so stale cache slots — even NaN — cannot
leak in.

Cost: the useful FLOPs plus the rest of each tile (a program's last KV block, rounded up to
BLOCK_N keys, and its row block, BLOCK_M rows whether the sequence fills them or not: BLOCK_M is
chosen for the batch's longest sequence, so a decode sequence in a verify step computes as many
rows as the longest), one launch per layer, K and V read once per kv head and query block.
``cost()`` in cost.py counts these tiles with the sizes ``tile_sizes`` gives the kernel.

Where it runs. On CUDA tensors the kernel is compiled by ``triton.jit``. On CPU tensors,
minibass runs the same Python function in Triton's interpreter itself, so no
``TRITON_INTERPRET=1`` is needed; the interpreter runs the kernel with NumPy, correct but slow.
Both forms come from ``triton_shim.py``, the one place that touches Triton internals. Where
Triton is not installed, calling this backend raises ImportError with an install hint; the
others still work.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from .base import DTYPES, AttentionMetadata, check_inputs


class _Kernels:
    """The compiled (CUDA) and interpreted (CPU) forms of the one kernel, built on first use."""

    compiled = None
    interpreted = None

    @classmethod
    def get(cls, on_cpu: bool):
        try:
            from . import triton_shim
            from .ragged_kernel import ragged_attention_kernel
        except ImportError as error:
            if type(error).__name__ == "TritonVersionError":  # installed, but too different: its own message
                raise
            raise ImportError("the 'ragged' attention backend needs Triton (pip install 'triton>=3.6'); "
                              "the 'naive', 'padded' and 'split' backends work without it") from error
        if on_cpu:
            if cls.interpreted is None:
                cls.interpreted = triton_shim.interpreted(ragged_attention_kernel)
            return cls.interpreted
        if cls.compiled is None:
            cls.compiled = triton_shim.compiled(ragged_attention_kernel)
        return cls.compiled


TILE_BYTES = 32 * 1024  # a Q, K or V tile's budget (64 x 128 float32, 64 x 256 float16); 16-row tiles may pass it


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tile_sizes(max_q_len: int, group: int, head_dim: int, itemsize: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D) of a launch: rows of (query, head in the group), keys, head dim.

    ``tl.dot`` needs every tile dimension >= 16 on a GPU. BLOCK_D is the head dim rounded up to a
    power of two, at least 16 (the columns past it are masked). BLOCK_M is 16 while the longest
    sequence's ``max_q_len * group`` rows fit in it, else 64; BLOCK_N is 64. Both shrink (to 32 or
    16) where a tile of BLOCK_D elements of ``itemsize`` bytes would pass ``TILE_BYTES``: the
    compiled kernel holds the Q tile and several K and V tiles in a GPU's shared memory, and
    float64 at head dim 128 with 64-key tiles asked an H200 for 287,232 bytes of its 232,448."""
    rows = max_q_len * group  # most (query, head) rows any sequence has
    block_d = max(16, _next_power_of_2(head_dim))
    widest = max(16, min(64, TILE_BYTES // (block_d * itemsize)))  # rows of a tile within TILE_BYTES
    return (16 if rows <= 16 else widest), widest, block_d


def ragged(q: Tensor, k_cache: Tensor, v_cache: Tensor, q_lens: Tensor, kv_lens: Tensor,
           *, scale: float | None = None) -> Tensor:
    """Ragged attention as one Triton launch (checked entry point). Shapes: see ``minibass.attention.base``."""
    meta, scale = check_inputs(q, k_cache, v_cache, q_lens, kv_lens, scale)
    return ragged_forward(q, k_cache, v_cache, meta, scale)


def ragged_forward(q: Tensor, k_cache: Tensor, v_cache: Tensor, meta: AttentionMetadata, scale: float) -> Tensor:
    """One kernel launch on already-checked inputs; the grid comes from the host maxima in ``meta``."""
    if q.dtype not in DTYPES:
        raise ValueError(f"q dtype must be float16, bfloat16, float32 or float64 for 'ragged', got {q.dtype}")
    on_cpu = q.device.type == "cpu"
    batch, n_kv_heads, _, head_dim = k_cache.shape
    group = q.shape[1] // n_kv_heads
    if q.shape[0] == 0:
        return torch.empty_like(q)
    # The kernel indexes the head dimension with stride 1.
    q = q if q.stride(-1) == 1 else q.contiguous()
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (total_q, H, D), contiguous
    k_cache = k_cache if k_cache.stride(-1) == 1 else k_cache.contiguous()
    v_cache = v_cache if v_cache.stride(-1) == 1 else v_cache.contiguous()

    rows = meta.max_q_len * group  # most (query, head) rows any sequence has
    block_m, block_n, block_d = tile_sizes(meta.max_q_len, group, head_dim, q.element_size())
    # Half-precision tiles go into tl.dot as they are, on a GPU and in the interpreter alike, but for
    # bfloat16 in the interpreter, whose bfloat16 arithmetic is unreliable: it computes in float32.
    upcast = q.dtype in (torch.float32, torch.float64) or (on_cpu and q.dtype == torch.bfloat16)
    precision = "ieee"  # float32 stays float32: no TF32 unless the caller converts first
    if q.dtype == torch.float64:  # a Python float reaches a compiled kernel as float32: scale q here instead
        q, scale = q * scale, 1.0
    kernel = _Kernels.get(on_cpu)
    grid = (batch, n_kv_heads, -(-rows // block_m))  # ceil(rows / block_m) row blocks
    # Triton launches on the current CUDA device: make it q's (a no-op where it already is).
    with torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext():
        kernel[grid](
            q, k_cache, v_cache, out, meta.q_starts, meta.q_lens, meta.kv_lens, float(scale),
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
            GROUP=group, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
            UPCAST=upcast, PRECISION=precision,
        )
    return out
