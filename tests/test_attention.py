"""All four attention backends against a float64 run of the naive specification.

Inputs are ragged (idle sequences, prefill with q_len == kv_len, decode with q_len == 1),
the cache has spare capacity filled with NaN/inf that must never leak in, and heads cover
MHA, GQA and MQA. The Triton kernel runs through the interpreter on the CPU.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from hypothesis import given, strategies as st

from minibass.attention import BACKENDS, FORWARDS, AttentionMetadata, cost, naive

# Tolerance per dtype: the backends may sum in another order than the float64 reference, and
# low-precision outputs are rounded once to the output dtype (bf16 keeps 8 bits of mantissa).
# minibass's own backends accumulate in fp32 (fp64 for fp64) and round once: held to half the oracle's
# tolerances for fp16 and bf16 (oracle.ATOL), which are wide enough for kernels that round on the way too.
ATOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


# CUDA runs the Triton kernel compiled for real (on a GPU machine: scripts/gpu_check.sh).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make_batch(q_lens, kv_lens, n_heads, n_kv_heads, head_dim, *, capacity=None, dtype=torch.float32, seed=0,
               device="cpu"):
    """Packed q and a cache whose slots beyond kv_lens are poisoned with NaN and inf."""
    g = torch.Generator().manual_seed(seed)
    batch = len(q_lens)
    capacity = max(kv_lens) + 7 if capacity is None else capacity
    q = torch.randn(sum(q_lens), n_heads, head_dim, generator=g)
    k = torch.randn(batch, n_kv_heads, capacity, head_dim, generator=g)
    v = torch.randn(batch, n_kv_heads, capacity, head_dim, generator=g)
    for b, n in enumerate(kv_lens):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("inf")
    return tuple(t.to(device) for t in (q.to(dtype), k.to(dtype), v.to(dtype), torch.tensor(q_lens),
                                        torch.tensor(kv_lens)))


def reference(q, k, v, q_lens, kv_lens):
    return naive(*(t.cpu().double() for t in (q, k, v)), q_lens.cpu(), kv_lens.cpu())


def assert_matches_reference(name, q, k, v, q_lens, kv_lens):
    out = BACKENDS[name](q, k, v, q_lens, kv_lens)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), f"{name}: non-finite output (stale cache leaked?)"
    err = (out.cpu().double() - reference(q, k, v, q_lens, kv_lens)).abs().max().item() if out.numel() else 0.0
    assert err <= ATOL[q.dtype], f"{name} {q.dtype}: max abs error {err:.3g} > {ATOL[q.dtype]}"


@st.composite
def ragged_batches(draw):
    batch = draw(st.integers(1, 12))
    kv_lens = [draw(st.integers(0, 300)) for _ in range(batch)]  # 0: a sequence with nothing cached yet
    q_lens = [draw(st.integers(0, min(9, kv))) for kv in kv_lens]
    if draw(st.booleans()):  # one sequence prefilling its whole cache
        b = draw(st.integers(0, batch - 1))
        kv_lens[b] = q_lens[b] = draw(st.integers(1, 40))
    n_kv_heads = draw(st.sampled_from([1, 2, 4]))
    group = draw(st.sampled_from([1, 2, 3, 4]))  # MHA (1), GQA, MQA when n_kv_heads == 1; 3 fills no power of two
    head_dim = draw(st.sampled_from([8, 16, 32, 64, 128, 59]))
    capacity = max(kv_lens) + draw(st.integers(0, 7))  # 0: the longest sequence fills its cache
    return q_lens, kv_lens, n_kv_heads * group, n_kv_heads, head_dim, capacity


EVERY_DTYPE = (torch.float32, torch.bfloat16, torch.float16, torch.float64)  # every dtype the backends take


@pytest.mark.parametrize("name", sorted(BACKENDS))
@given(case=ragged_batches(), dtype=st.sampled_from(EVERY_DTYPE))
def test_backends_match_the_float64_specification(name, case, dtype):
    q_lens, kv_lens, n_heads, n_kv_heads, head_dim, capacity = case
    assert_matches_reference(name, *make_batch(q_lens, kv_lens, n_heads, n_kv_heads, head_dim, capacity=capacity,
                                               dtype=dtype))


GRID = {
    "odd-lengths": ([1, 3, 2], [1, 97, 257]),
    "decode": ([1] * 5, [5, 64, 65, 130, 7]),
    "decode-equal-lengths": ([1] * 3, [33] * 3),  # nothing ragged: PAD needs no mask and no padding
    "all-equal": ([4] * 4, [50] * 4),
    "one-long-many-short": ([2] * 8, [1000] + [3] * 7),
    "idle-and-prefill": ([0, 9, 0, 6], [12, 9, 1, 40]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BACKENDS))
@pytest.mark.parametrize("shape", sorted(GRID))
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (8, 1)], ids=["mha", "gqa", "mqa"])
def test_backends_on_an_explicit_grid(name, shape, heads, device):
    q_lens, kv_lens = GRID[shape]
    for dtype in ([torch.float32] if device == "cpu" else [torch.float32, torch.float16, torch.bfloat16]):
        assert_matches_reference(name, *make_batch(q_lens, kv_lens, *heads, 64, dtype=dtype, device=device))


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_forward_with_step_metadata_equals_the_checked_call(name):
    """What the decoder calls in every layer (FORWARDS, metadata built once) is the public backend, unchecked."""
    q, k, v, q_lens, kv_lens = make_batch([2, 0, 3], [5, 4, 9], 4, 2, 16)
    meta = AttentionMetadata.build(q_lens, kv_lens, q.device)
    assert (meta.max_q_len, meta.max_kv_len, meta.host_q_starts) == (3, 9, [0, 2, 2])
    assert meta.positions.tolist() == [3, 4, 6, 7, 8] and meta.seq_ids.tolist() == [0, 0, 2, 2, 2]
    torch.testing.assert_close(FORWARDS[name](q, k, v, meta, 16 ** -0.5), BACKENDS[name](q, k, v, q_lens, kv_lens),
                               rtol=0, atol=0)


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40)), min_size=1, max_size=9))
def test_step_metadata_and_pack_positions_pack_as_the_tensor_formula(lengths):
    """AttentionMetadata.build and cache.pack_positions (both on Python lists) against the packing
    written as tensor ops: token i of the packed batch belongs to seq_ids[i] and sits at its cached
    length plus its offset within the step."""
    from minibass.cache import pack_positions

    q_lens = torch.tensor([q for q, _ in lengths])
    cached = torch.tensor([c for _, c in lengths])
    kv_lens = q_lens + cached
    seq_ids = torch.repeat_interleave(torch.arange(len(q_lens)), q_lens)  # (N,)
    q_starts = torch.cumsum(q_lens, 0) - q_lens  # (B,)
    offsets = torch.arange(len(seq_ids)) - q_starts[seq_ids]  # (N,)
    positions = cached[seq_ids] + offsets  # (N,)
    meta = AttentionMetadata.build(q_lens, kv_lens, "cpu")
    assert meta.seq_ids.tolist() == seq_ids.tolist() and meta.positions.tolist() == positions.tolist()
    assert meta.q_starts.tolist() == meta.host_q_starts == q_starts.tolist()
    assert meta.offsets.tolist() == offsets.tolist()
    assert meta.q_lens.tolist() == meta.host_q_lens == q_lens.tolist()
    assert meta.kv_lens.tolist() == meta.host_kv_lens == kv_lens.tolist()
    assert all(t.dtype == torch.long for t in (meta.seq_ids, meta.positions, meta.offsets, meta.q_starts))
    packed = pack_positions(q_lens, cached)
    assert [t.tolist() for t in packed] == [seq_ids.tolist(), q_starts.tolist(), positions.tolist()]
    assert all(t.dtype == torch.long for t in packed)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_custom_scale_and_non_contiguous_query(name):
    q, k, v, q_lens, kv_lens = make_batch([2, 3], [5, 9], 4, 2, 32)
    q_strided = torch.randn(q.shape[0], q.shape[2], q.shape[1]).transpose(1, 2)  # (total_q, H, D), not contiguous
    ref = naive(q_strided.double(), k.double(), v.double(), q_lens, kv_lens, scale=0.3)
    out = BACKENDS[name](q_strided, k, v, q_lens, kv_lens, scale=0.3)
    assert (out.double() - ref).abs().max() <= ATOL[torch.float32]


BAD_INPUTS = [
    ("rank", lambda q, k, v, ql, kl: (q[0], k, v, ql, kl), "q must have shape"),
    ("heads", lambda q, k, v, ql, kl: (q[:, :3], k, v, ql, kl), "multiple of"),
    ("head_dim", lambda q, k, v, ql, kl: (q[..., :8], k, v, ql, kl), "head_dim"),
    ("v shape", lambda q, k, v, ql, kl: (q, k, v[:, :, :4], ql, kl), "v_cache shape"),
    ("q > kv", lambda q, k, v, ql, kl: (q, k, v, ql, torch.tensor([1, 9])), "q_lens must be <= kv_lens"),
    ("negative q", lambda q, k, v, ql, kl: (q, k, v, torch.tensor([-1, 6]), kl), "q_lens must be >= 0"),
    ("kv > capacity", lambda q, k, v, ql, kl: (q, k[:, :, :6], v[:, :, :6], ql, kl), "kv_lens must be <= capacity"),
    ("total_q", lambda q, k, v, ql, kl: (q[:-1], k, v, ql, kl), "total_q"),
    ("dtype", lambda q, k, v, ql, kl: (q.double(), k, v, ql, kl), "share one dtype"),
    ("float8", lambda q, k, v, ql, kl: (q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn),
                                        v.to(torch.float8_e4m3fn), ql, kl), "one of float16, bfloat16, float32 or float64"),
    ("head_dim 0", lambda q, k, v, ql, kl: (q[..., :0], k[..., :0], v[..., :0], ql, kl), "head_dim must be >= 1"),
    ("scale inf", lambda q, k, v, ql, kl: (q, k, v, ql, kl, float("inf")), "finite float"),
    ("scale nan", lambda q, k, v, ql, kl: (q, k, v, ql, kl, float("nan")), "finite float"),
    ("float lens", lambda q, k, v, ql, kl: (q, k, v, ql.float(), kl), "q_lens must be a 1-D integer"),
    ("batch", lambda q, k, v, ql, kl: (q, k, v, ql, kl[:1]), "kv_lens has 1 entries"),
    ("devices", lambda q, k, v, ql, kl: (q.to("meta"), k, v, ql, kl), "one device"),
    ("v dtype", lambda q, k, v, ql, kl: (q, k, v.double(), ql, kl), "share one dtype"),
    ("no kv heads", lambda q, k, v, ql, kl: (q, k[:, :0], v[:, :0], ql, kl), "multiple of"),
    ("bool lens", lambda q, k, v, ql, kl: (q, k, v, ql.bool(), kl), "q_lens must be a 1-D integer"),
    ("2-D lens", lambda q, k, v, ql, kl: (q, k, v, ql, kl[:, None]), "kv_lens must be a 1-D integer"),
    ("bool scale", lambda q, k, v, ql, kl: (q, k, v, ql, kl, True), "finite float"),
    ("wider q", lambda q, k, v, ql, kl: (torch.cat([q, q], -1), k, v, ql, kl), "head_dim"),
]


@pytest.mark.parametrize("name", sorted(BACKENDS))
@pytest.mark.parametrize("label,mutate,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_raise_value_error_naming_the_argument(name, label, mutate, message):
    q, k, v, q_lens, kv_lens, *scale = mutate(*make_batch([2, 3], [5, 9], 4, 2, 16))
    with pytest.raises(ValueError, match=message):
        BACKENDS[name](q, k, v, q_lens, kv_lens, scale=scale[0] if scale else None)


def test_padded_leaves_a_cache_shared_by_broadcast_intact():
    """One prompt's cache shared by the batch with ``expand``: a slot stale for one sequence is valid for
    another, so PAD's zeroing of stale V slots must not reach it through the shared memory."""
    q, k, v, q_lens, kv_lens = make_batch([1, 2, 1], [3, 9, 6], 4, 2, 16)
    k, v = k[1:2].expand(3, -1, -1, -1), v[1:2].expand(3, -1, -1, -1)  # sequence 1's cache, valid up to 9
    before, expected = v.clone(), reference(q, k, v, q_lens, kv_lens)
    out = BACKENDS["padded"](q, k, v, q_lens, kv_lens)
    assert torch.equal(v, before)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=ATOL[torch.float32])


@given(case=ragged_batches(), dtype=st.sampled_from(EVERY_DTYPE), queries=st.integers(0, 5))
def test_padded_in_blocks_of_queries_matches_the_specification(case, dtype, queries):
    """A long prefill's scores would not fit in memory: PAD then takes the queries in blocks that keep the
    scores held at once within ``SCORE_ELEMENTS`` (here made small, so that ragged batches of every shape
    are cut into blocks of 1 to 5 queries, each with its G head rows; 0: a budget of one score, below one
    query's). Every block's scores fit, unless one query alone does not, the blocks cover every query once
    in order, and the output is the specification's."""
    from unittest import mock

    padded_module = importlib.import_module("minibass.attention.padded")
    q_lens, kv_lens, n_heads, n_kv_heads, head_dim, capacity = case
    budget = max(1, queries * len(q_lens) * n_heads * max(kv_lens))  # B * Hk * G * Tk scores per query
    batch = make_batch(q_lens, kv_lens, n_heads, n_kv_heads, head_dim, capacity=capacity, dtype=dtype)
    rows, attend = [], padded_module.attend_block

    def recorded(q_rows, k, v, hidden, scale):
        scores = q_rows.shape[0] * q_rows.shape[1] * q_rows.shape[2] * k.shape[2]
        assert scores <= budget or q_rows.shape[2] == n_heads // n_kv_heads, "a block of several queries too big"
        rows.append(q_rows.shape[2])
        return attend(q_rows, k, v, hidden, scale)

    with mock.patch.object(padded_module, "SCORE_ELEMENTS", budget), \
            mock.patch.object(padded_module, "attend_block", recorded):
        assert_matches_reference("padded", *batch)
    if sum(q_lens):
        assert sum(rows) == max(q_lens) * (n_heads // n_kv_heads)  # every padded query row, once


def test_padded_takes_a_long_prefill_in_blocks_and_a_decode_step_whole():
    """With the shipped ``SCORE_ELEMENTS``: 8 prompts of 2,000 tokens at 32 heads (8 kv heads) would hold 1 G
    scores at once, so the prefill goes in blocks of 32 queries; a verify of 5 tokens over 4,096 cached
    ones at batch 16 is one block."""
    from minibass.attention.padded import SCORE_ELEMENTS, query_block

    assert query_block(8, 8, 4, 2000) == SCORE_ELEMENTS // (8 * 8 * 4 * 2000) == 32
    assert 8 * 8 * 4 * 2000 * query_block(8, 8, 4, 2000) <= SCORE_ELEMENTS < 8 * 8 * 4 * 2000 * 2000
    assert query_block(16, 8, 4, 4096) >= 5
    assert query_block(1, 1, 1, 1 << 30) == 1  # one query even where its scores alone are over the budget


@pytest.mark.parametrize("name", ["ragged"])  # (a parameter, so that it skips where Triton is missing)
def test_ragged_in_float64_does_not_rest_on_a_float64_scalar(name, monkeypatch):
    """A compiled Triton kernel receives a Python float as float32 (the interpreter passes it on unrounded).
    Launched with every float argument rounded so, ``ragged`` must still match the float64 specification
    to float64 precision: the softmax scale must not travel as a scalar argument."""
    import numpy as np

    module = sys.modules["minibass.attention.ragged"]
    interpreted = module._Kernels.get(on_cpu=True)

    class AsCompiled:
        def __getitem__(self, grid):
            launch = interpreted[grid]
            return lambda *args, **constants: launch(
                *[float(np.float32(a)) if isinstance(a, float) else a for a in args], **constants)

    monkeypatch.setattr(module._Kernels, "get", classmethod(lambda cls, on_cpu: AsCompiled()))
    q, k, v, q_lens, kv_lens = make_batch([1, 3, 2], [40, 97, 5], 8, 2, 59, dtype=torch.float64)  # 59 ** -0.5
    assert_matches_reference(name, q, k, v, q_lens, kv_lens)


def test_cost_counts_the_tiles_the_kernel_launches():
    """The ragged row: BLOCK_M rows of (query, head) per tile, 16 or 64 as the kernel picks for the batch's
    longest sequence, by BLOCK_N = 64 keys (at 2 bytes per element), over the head dim rounded up to a power
    of two."""
    heads = dict(n_heads=32, n_kv_heads=8)  # G = 4
    short = cost([4, 1], [100, 50], head_dim=128, **heads)  # 16 rows at most: 16-row tiles
    assert short.flops["ragged"] == 4 * 128 * 8 * 16 * (128 + 64)  # keys rounded up: 100 -> 128, 50 -> 64
    long = cost([8, 1], [100, 50], head_dim=59, **heads)  # 32 rows: 64-row tiles, for the decode sequence too
    assert long.flops["ragged"] == 4 * 64 * 8 * 64 * (128 + 64)  # head dim 59 computed as 64
    assert long.flops["ragged"] == cost([8, 1], [100, 50], head_dim=59, block_m=64, block_n=64, **heads).flops["ragged"]


@pytest.mark.parametrize("itemsize,head_dim,rows,expected", [
    (2, 128, 40, (64, 64, 128)), (2, 256, 40, (64, 64, 256)), (4, 128, 40, (64, 64, 128)),  # as before: 32 KiB tiles
    (4, 256, 40, (32, 32, 256)), (8, 128, 40, (32, 32, 128)), (8, 128, 8, (16, 32, 128)),  # wide: fewer rows
    (8, 256, 40, (16, 16, 256)), (2, 59, 8, (16, 64, 64)), (8, 1024, 40, (16, 16, 1024)),
])
def test_tiles_shrink_for_wide_dtypes_to_fit_shared_memory(itemsize, head_dim, rows, expected):
    """BLOCK_M and BLOCK_N shrink where a tile of BLOCK_D elements would pass TILE_BYTES (float64 at head
    dim 128 with 64-key tiles asked an H200 for 287,232 bytes of shared memory, of 232,448), never below the 16 that
    ``tl.dot`` needs on a GPU; rows = max_q_len * group."""
    from minibass.attention.ragged import TILE_BYTES, tile_sizes

    block_m, block_n, block_d = tile_sizes(rows, 1, head_dim, itemsize)
    assert (block_m, block_n, block_d) == expected
    assert max(block_m, block_n) * block_d * itemsize <= TILE_BYTES or min(block_m, block_n) == 16


@given(rows=st.integers(0, 600), group=st.sampled_from([1, 2, 3, 4, 8]), head_dim=st.integers(1, 256),
       itemsize=st.sampled_from([2, 4, 8]))
def test_every_tile_up_to_head_dim_256_fits_the_budget(rows, group, head_dim, itemsize):
    """What the compiled kernel needs without a GPU to say so: for every dtype the kernel takes and every head
    dim up to 256, each Q, K and V tile stays within TILE_BYTES, and every tile dimension is a power of two >= 16
    (``tl.dot`` on a GPU)."""
    from minibass.attention.ragged import TILE_BYTES, tile_sizes

    block_m, block_n, block_d = tile_sizes(rows, group, head_dim, itemsize)
    assert max(block_m, block_n) * block_d * itemsize <= TILE_BYTES
    assert all(b >= 16 and b & (b - 1) == 0 for b in (block_m, block_n, block_d)) and block_d >= head_dim


@pytest.mark.parametrize("dtype,block_n", [(torch.float16, 64), (torch.float32, 64), (torch.float64, 32)])
def test_the_kernel_launches_with_the_tiles_of_its_dtype(ragged_launches, dtype, block_n):
    """The wrapper passes q's element size to ``tile_sizes``: at head dim 128, float64 gets 32-key tiles."""
    BACKENDS["ragged"](*make_batch([2, 1], [40, 9], 4, 4, 128, dtype=dtype))
    _, _, constants = ragged_launches[0]
    assert (constants["BLOCK_M"], constants["BLOCK_N"], constants["BLOCK_D"]) == (16, block_n, 128)


def test_cost_accounting():
    c = cost([1, 1], [10, 100], n_heads=2, head_dim=4, block_n=16)
    per_key = 4 * 2 * 4  # QK^T and PV multiply-adds, per head, per (query, key) pair
    assert c.useful_flops == per_key * (10 + 100)
    assert c.flops["padded"] == per_key * 2 * 100  # both sequences padded to 100 keys
    assert c.waste("padded") == pytest.approx(200 / 110)
    assert c.launches == {"naive": 4, "split": 2, "padded": 1, "ragged": 1}
    assert c.waste("split") == 1.0
    with pytest.raises(ValueError, match="q_lens <= kv_lens"):
        cost([3], [2])
