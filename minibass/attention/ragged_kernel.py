"""The Triton kernel behind the ``ragged`` backend (the algorithm is explained in ragged.py).

This module imports Triton at the top, so ``ragged.py`` imports it only when the backend is
first used; minibass works without Triton installed. The function is left undecorated:
``ragged.py`` wraps it with ``triton.jit`` for CUDA tensors and with Triton's interpreter for
CPU tensors.
"""

import triton.language as tl

from .triton_shim import MAX, SUM  # tl.max / tl.sum combiners that also run in the interpreter (see the shim)


def ragged_attention_kernel(
    Q, K, V, O, Q_STARTS, Q_LENS, KV_LENS, scale,
    stride_qn, stride_qh, stride_kb, stride_kh, stride_kc, stride_vb, stride_vh, stride_vc, stride_on, stride_oh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    b = tl.program_id(0)  # sequence
    hk = tl.program_id(1)  # kv head
    m_block = tl.program_id(2)  # block of BLOCK_M rows of (query, head-in-group)
    q_len = tl.load(Q_LENS + b).to(tl.int32)
    kv_len = tl.load(KV_LENS + b).to(tl.int32)
    q_start = tl.load(Q_STARTS + b).to(tl.int64)
    if m_block * BLOCK_M >= q_len * GROUP:
        return  # this sequence has fewer rows (or is idle this step)

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)  # row ids
    offs_d = tl.arange(0, BLOCK_D)  # BLOCK_D = head_dim rounded up to a power of two >= 16
    q_idx = offs_m // GROUP  # query index within the sequence
    head = hk * GROUP + offs_m % GROUP  # query head
    row_ok = q_idx < q_len
    d_ok = offs_d < HEAD_DIM
    q = tl.load(Q + (q_start + q_idx)[:, None] * stride_qn + head[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
    if UPCAST:  # fp32/fp64 math (and bf16 in the interpreter, whose bf16 arithmetic is unreliable)
        q = q.to(O.dtype.element_ty if O.dtype.element_ty == tl.float64 else tl.float32)
    q_pos = kv_len - q_len + q_idx  # absolute position of each row's query

    acc_ty = tl.float64 if O.dtype.element_ty == tl.float64 else tl.float32
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=acc_ty)
    l_i = tl.full((BLOCK_M,), 0.0, dtype=acc_ty)
    acc = tl.full((BLOCK_M, BLOCK_D), 0.0, dtype=acc_ty)

    last_row = tl.minimum(m_block * BLOCK_M + BLOCK_M - 1, q_len * GROUP - 1) // GROUP
    hi = kv_len - q_len + last_row + 1  # keys beyond this are in every row's future
    # Offsets into the cache and the packed Q / O are 64-bit (q_start above too): b * stride_kb
    # passes 2**31 for a cache of more than 2**31 elements per layer, where int32 would wrap, and so
    # can a slot's offset in a cache laid out slot-major ([C, B, Hk, D] viewed as [B, Hk, C, D]).
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < kv_len
        slot = offs_n.to(tl.int64)
        k = tl.load(k_base + slot[None, :] * stride_kc + offs_d[:, None],
                    mask=n_ok[None, :] & d_ok[:, None], other=0.0)  # (BLOCK_D, BLOCK_N)
        v = tl.load(v_base + slot[:, None] * stride_vc + offs_d[None, :],
                    mask=n_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_N, BLOCK_D)
        if UPCAST:
            k = k.to(acc_ty)
            v = v.to(acc_ty)
        s = tl.dot(q, k, input_precision=PRECISION).to(acc_ty) * scale  # (BLOCK_M, BLOCK_N)
        allowed = (offs_n[None, :] <= q_pos[:, None]) & n_ok[None, :]
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(s, 1, MAX))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # padding rows: avoid (-inf) - (-inf)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.reduce(p, 1, SUM)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(acc_ty)
        m_i = m_new

    out = acc / tl.where(l_i == 0, 1.0, l_i)[:, None]  # l_i > 0 for every real row: key 0 is always visible
    tl.store(O + (q_start + q_idx)[:, None] * stride_on + head[:, None] * stride_oh + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
