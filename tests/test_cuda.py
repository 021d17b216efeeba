"""On a GPU: the Triton kernel compiled for real, and the decoding loops on CUDA tensors.

Skipped on machines without CUDA (CI has none); ``scripts/gpu_check.sh`` runs this file on a GPU.
The CPU tests run the same kernel in Triton's interpreter, which accepts tile sizes and dtypes a
real compilation may not; these tests are where a GPU-only failure would show.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import minibass
from minibass.attention import BACKENDS
from test_attention import EVERY_DTYPE, GRID, assert_matches_reference, make_batch, ragged_batches

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh)")


@pytest.mark.parametrize("name", sorted(BACKENDS))
@settings(max_examples=25)
@given(case=ragged_batches(), dtype=st.sampled_from(EVERY_DTYPE))
def test_backends_on_cuda_match_the_float64_specification(name, case, dtype):
    """Ragged, odd-sized batches with poisoned spare cache slots, each backend on CUDA tensors."""
    q_lens, kv_lens, n_heads, n_kv_heads, head_dim, capacity = case
    assert_matches_reference(name, *make_batch(q_lens, kv_lens, n_heads, n_kv_heads, head_dim, capacity=capacity,
                                               dtype=dtype, device="cuda"))


@pytest.mark.parametrize("dtype", EVERY_DTYPE, ids=lambda dtype: str(dtype).removeprefix("torch."))
@pytest.mark.parametrize("head_dims", [None, 256], ids=["oracle-head-dims", "d256"])
def test_the_oracle_passes_the_compiled_kernel(head_dims, dtype):
    """The oracle's grid, random cases and large scores (which the hypothesis draws above do not reach) on the
    compiled kernel: every dtype at the head dims the CPU suite uses (float64 included: its scale must not travel
    as a float32 scalar), and again at head dim 256, the widest tile (BLOCK_D = 256). Wide tiles of wide dtypes must
    fit in shared memory: float64 at head dim 128 once asked an H200 for 287,232 bytes of its 232,448
    (``tile_sizes``). One dtype per test, so that parallel workers share the compiling (each dtype is compiled
    apart; with the four dtypes in each of two tests, both ran on one worker for 113 s on a fresh H200)."""
    from minibass import oracle

    verdict = oracle.check_attention(BACKENDS["ragged"], dtypes=(dtype,), device="cuda", cases=40,
                                     head_dims=head_dims)
    assert verdict.ok, str(verdict)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_ragged_launches_on_the_device_of_its_tensors():
    """Tensors on cuda:1 while cuda:0 is current: Triton launches on the current device unless told."""
    torch.cuda.set_device(0)
    assert_matches_reference("ragged", *make_batch([1, 3, 2], [40, 97, 5], 8, 2, 64, device="cuda:1"))


def test_default_backend_on_cuda_is_the_compiled_kernel():
    assert minibass.attention.default_backend("cuda") == "ragged"


@pytest.fixture(scope="module")
def demo_pair_on_cuda():
    from minibass import zoo

    target, draft, tokenizer = zoo.load_demo_pair(device="cuda")
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(6)]
    return target, draft, prompts


@pytest.mark.parametrize("attention", ["padded", "split", "ragged"])
def test_greedy_speculative_equals_regular_on_cuda(demo_pair_on_cuda, attention):
    """The demo pair on the GPU: greedy speculative decoding gives the regular loop's tokens, for
    every backend and draft-length policy (`test_the_gpu_agrees_with_the_cpu_on_greedy_tokens` compares
    regular decoding with the CPU's)."""
    target, draft, prompts = demo_pair_on_cuda
    greedy = minibass.SamplingParams(temperature=0)
    ref = minibass.generate(target, prompts, 24, sampling=greedy, attention=attention).tokens
    for k in [1, 4, "dynamic", "per-sequence", "auto"]:
        out = minibass.speculative_generate(target, draft, prompts, 24, sampling=greedy, draft_length=k,
                                            attention=attention)
        assert out.tokens == ref, (attention, k)
        assert out.stats.new_tokens == sum(map(len, ref))


def test_sampled_runs_on_cuda_are_reproducible(demo_pair_on_cuda):
    """Temperature sampling on the GPU: the same seed gives the same tokens (the streams are per sequence)."""
    target, draft, prompts = demo_pair_on_cuda
    params = minibass.SamplingParams(temperature=0.8)
    runs = [minibass.speculative_generate(target, draft, prompts, 16, sampling=params, seed=3).tokens
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_the_gpu_agrees_with_the_cpu_on_greedy_tokens(demo_pair_on_cuda):
    from minibass import zoo

    target, _, prompts = demo_pair_on_cuda
    cpu_target, _, _ = zoo.load_demo_pair()
    greedy = minibass.SamplingParams(temperature=0)
    on_gpu = minibass.generate(target, prompts, 24, sampling=greedy).tokens
    on_cpu = minibass.generate(cpu_target, prompts, 24, sampling=greedy).tokens
    same = sum(a == b for a, b in zip(on_gpu, on_cpu))
    assert same == len(prompts), f"{len(prompts) - same} of {len(prompts)} prompts differ between GPU and CPU"


def test_grid_shapes_in_half_precision_on_cuda():
    """Some of test_attention's explicit-grid shapes at head_dim 128 (the kernel's largest block)."""
    for q_lens, kv_lens in (GRID[shape] for shape in ("odd-lengths", "one-long-many-short", "idle-and-prefill")):
        for dtype in (torch.float16, torch.bfloat16):
            for name in sorted(BACKENDS):
                assert_matches_reference(name, *make_batch(q_lens, kv_lens, 32, 8, 128, dtype=dtype, device="cuda"))
