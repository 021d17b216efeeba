"""The attention package at its edges: cache layouts the decoder never makes, the tiles the ragged kernel
visits against ``cost()``, cost's other rows, the Triton version gate and the device default. The Triton
kernel runs through the interpreter on the CPU."""

from __future__ import annotations

import builtins
import sys
import types

import pytest
import torch

import minibass.attention
from minibass.attention import BACKENDS, cost, default_backend, triton_available
from minibass.attention.ragged import tile_sizes
from test_attention import assert_matches_reference, make_batch

needs_triton = pytest.mark.skipif(not triton_available(),
                                  reason="the 'ragged' backend needs Triton, which installs on Linux only")


# ---------------------------------------------------------------- cache layouts (every backend)
def strided_head_dim(t):
    """The same values, laid out [B, Hk, D, C] and viewed as [B, Hk, C, D]: the head dim has stride C."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def slot_major(t):
    """The same values, laid out [C, B, Hk, D] and viewed as [B, Hk, C, D]."""
    return t.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)


LAYOUTS = {
    "k-head-dim-strided": lambda k, v: (strided_head_dim(k), v),
    "v-head-dim-strided": lambda k, v: (k, strided_head_dim(v)),
    "v-slot-major": lambda k, v: (k, slot_major(v)),
    "k-slot-major": lambda k, v: (slot_major(k), v),
}


@pytest.mark.parametrize("name", sorted(BACKENDS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_caches_in_other_layouts_give_the_same_output(name, layout):
    """A public call may pass K and V with strides of their own (each other's too): a backend must read each
    through its own strides, whether or not its head dim is contiguous."""
    q, k, v, q_lens, kv_lens = make_batch([1, 3, 0, 2], [65, 9, 4, 130], 8, 2, 16)
    k, v = LAYOUTS[layout](k, v)
    assert k.stride() != v.stride()
    assert_matches_reference(name, q, k, v, q_lens, kv_lens)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_query_whose_heads_are_its_outer_dimension_gives_a_packed_output(name):
    """q laid out [H, total_q, D] and viewed as [total_q, H, D] (head dim contiguous, rows not): the output is
    still in packed order, whatever q's strides."""
    q, k, v, q_lens, kv_lens = make_batch([2, 3], [5, 9], 4, 2, 16)
    q = q.transpose(0, 1).contiguous().transpose(0, 1)
    assert q.stride(-1) == 1 and not q.is_contiguous()
    assert_matches_reference(name, q, k, v, q_lens, kv_lens)


# ---------------------------------------------------------------- the kernel's tiles against cost()
def visited_key_tiles(monkeypatch, q_lens, kv_lens, n_heads, n_kv_heads, head_dim):
    """Runs ``ragged`` and returns, per program that reached its loop, how many key tiles it visited: the
    kernel's ``range(0, hi, BLOCK_N)``, counted through a ``range`` put into the kernel module's globals
    (where the interpreter looks a name up before the builtins)."""
    import minibass.attention.ragged_kernel as kernel_module

    visits = []

    def counting_range(*bounds):
        keys = builtins.range(*(b if isinstance(b, int) else int(b) for b in bounds))
        visits.append(len(keys))
        return keys

    monkeypatch.setattr(kernel_module, "range", counting_range, raising=False)
    q, k, v, ql, kl = make_batch(q_lens, kv_lens, n_heads, n_kv_heads, head_dim)
    out = BACKENDS["ragged"](q, k, v, ql, kl)
    monkeypatch.undo()
    assert torch.isfinite(out).all()
    assert_matches_reference("ragged", q, k, v, ql, kl)
    return visits


@needs_triton
@pytest.mark.parametrize("q_lens,kv_lens,expected", [
    # G = 4, at most 12 rows: BLOCK_M = 16, one row block per (sequence, kv head), BLOCK_N = 64.
    # A decode query at position 64 needs a second key tile; three queries ending at 63 need one;
    # an idle sequence returns before its loop; the last of two queries at 129 needs three tiles.
    ([1, 3, 0, 2], [65, 64, 5, 130], [2, 2, 1, 1, 3, 3]),
    # 20 queries x G = 4 = 80 rows: BLOCK_M = 64, two row blocks. The first ends at query 15, at position
    # 63 (one key tile); the second at query 19, position 67 (two).
    ([20], [68], [1, 2, 1, 2]),
], ids=["decode-and-verify", "two-row-blocks"])
def test_the_kernel_visits_only_the_key_tiles_its_rows_can_see_and_cost_counts_them(monkeypatch, q_lens, kv_lens,
                                                                                    expected):
    """A block of rows loops up to the last key its last row may see, not to kv_len (that would compute
    tiles that are masked out entirely): the ragged row of ``cost()`` counts exactly these tiles."""
    n_heads, n_kv_heads, head_dim = 8, 2, 16
    visits = visited_key_tiles(monkeypatch, q_lens, kv_lens, n_heads, n_kv_heads, head_dim)
    assert sorted(visits) == sorted(expected)  # one count per (sequence, kv head, row block) program
    itemsize = 4  # visited_key_tiles runs float32
    block_m, block_n, block_d = tile_sizes(max(q_lens), n_heads // n_kv_heads, head_dim, itemsize)
    tile_flops = 4 * block_d * block_m * block_n  # one (BLOCK_M x BLOCK_N) tile of QK^T and PV over BLOCK_D
    c = cost(q_lens, kv_lens, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim, bytes_per_element=itemsize)
    assert c.flops["ragged"] == tile_flops * sum(visits)


# ---------------------------------------------------------------- cost(): the other rows
def test_cost_pads_an_idle_sequence_and_launches_nothing_for_it():
    """PAD computes the batch rectangle for every sequence, idle ones included; the per-sequence strategies
    skip an idle sequence (naive: one launch per head of each active sequence)."""
    c = cost([0, 2, 1], [50, 10, 3], n_heads=4, head_dim=8)
    per_key = 4 * 4 * 8
    assert c.flops["padded"] == per_key * 3 * 2 * 50  # 3 sequences x 2 queries x 50 keys
    assert c.flops["naive"] == c.flops["split"] == per_key * (2 * 10 + 1 * 3)
    assert c.launches == {"naive": 2 * 4, "split": 2, "padded": 1, "ragged": 1}


def test_cost_counts_the_bytes_each_strategy_reads():
    """Q and O once; K and V for the keys read: per query head (naive, split), per kv head (ragged), or the
    padded rectangle of every sequence (padded). An idle sequence reads no keys, except in PAD."""
    h, hk, d, e = 4, 2, 8, 2  # G = 2
    c = cost([2, 0, 1], [10, 7, 4], n_heads=h, n_kv_heads=hk, head_dim=d, bytes_per_element=e)
    q_and_o = 2 * 3 * h * d * e  # 3 queries
    k_and_v = 2 * (10 + 4) * d * e  # per head, the active sequences' keys
    assert c.bytes["ragged"] == q_and_o + hk * k_and_v
    assert c.bytes["naive"] == c.bytes["split"] == q_and_o + h * k_and_v
    assert c.bytes["padded"] == 2 * 3 * 2 * h * d * e + 2 * 3 * 10 * hk * d * e  # [B, Tq] queries, [B, Tk] keys


def test_cost_counts_a_key_tile_from_the_first_key_past_it():
    """Key 64 (the 65th) needs a second BLOCK_N = 64 tile; key 63 does not."""
    heads = dict(n_heads=4, n_kv_heads=4, head_dim=16)  # G = 1, 16-row tiles, BLOCK_D = 16
    tile = 4 * 16 * 4 * 16 * 64  # BLOCK_D x kv heads x BLOCK_M x BLOCK_N
    assert cost([1], [64], **heads).flops["ragged"] == tile
    assert cost([1], [65], **heads).flops["ragged"] == 2 * tile
    assert cost([2], [65], **heads).flops["ragged"] == 2 * tile  # the last of two queries sits at 64


def test_cost_of_an_idle_batch_wastes_nothing():
    c = cost([0, 0], [3, 5])
    assert c.useful_flops == 0 and all(c.waste(name) == 1.0 for name in c.flops)


@pytest.mark.parametrize("lengths,blocks,message", [
    (([-1, 2], [3, 2]), {}, "0 <= q_lens"),
    (([1], [3]), {"block_n": 0}, "block_m and block_n must be >= 1"),
    (([1], [3]), {"block_m": -16}, "block_m and block_n must be >= 1"),
], ids=["negative-q-len", "block_n-0", "block_m-negative"])
def test_cost_refuses_negative_lengths_and_empty_tiles(lengths, blocks, message):
    with pytest.raises(ValueError, match=message):
        cost(*lengths, **blocks)


# ---------------------------------------------------------------- the Triton version gate (triton_shim.py)
@needs_triton
@pytest.mark.parametrize("triton_version,numpy_version,refused", [
    ("3.6.0", "2.4.0", True),  # Triton 3.6's interpreter cannot run the kernel with NumPy 2.4
    ("3.6.0", "2.4.4", True),
    ("3.6.1", "2.3.5", False),
    ("3.9.0", "2.4.0", False),
    ("3.10.0", "2.4.0", False),
])
def test_the_interpreter_is_refused_only_for_an_old_triton_with_a_new_numpy(monkeypatch, triton_version,
                                                                            numpy_version, refused):
    from minibass.attention import triton_shim

    monkeypatch.setattr(triton_shim, "triton", types.SimpleNamespace(__version__=triton_version))
    monkeypatch.setattr(triton_shim, "np", types.SimpleNamespace(__version__=numpy_version))
    if refused:
        with pytest.raises(triton_shim.TritonVersionError, match="numpy<2.4"):
            triton_shim.interpreted(lambda: None)
    else:
        triton_shim.interpreted(lambda: None)


# ---------------------------------------------------------------- the device default (__init__.py)
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1", torch.device("cuda", 1)],
                         ids=["cuda", "cuda:0", "cuda:1", "torch.device-cuda-1"])
def test_default_backend_on_any_cuda_device(monkeypatch, device):
    """Every CUDA device, named with an index or not, gets the compiled kernel where Triton imports."""
    monkeypatch.setattr(minibass.attention, "triton_available", lambda: True)
    assert default_backend(device) == "ragged"
    monkeypatch.setattr(minibass.attention, "triton_available", lambda: False)
    assert default_backend(device) == "padded"


def test_triton_is_unavailable_where_it_does_not_import(monkeypatch):
    """``triton_available()`` is False where ``import triton`` fails, so CUDA falls back to 'padded'."""
    minibass.attention.triton_available.cache_clear()
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    monkeypatch.delitem(sys.modules, "minibass.attention.triton_shim", raising=False)
    monkeypatch.delattr(minibass.attention, "triton_shim", raising=False)
    try:
        assert minibass.attention.triton_available() is False
        assert default_backend("cuda") == "padded"
    finally:
        minibass.attention.triton_available.cache_clear()
    monkeypatch.undo()
    assert minibass.attention.triton_available() is (sys.modules.get("triton") is not None)
