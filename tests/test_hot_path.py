"""The hot path does less: checks once per step, no host reads inside a layer, device-aware defaults,
64-bit offsets in the kernel."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch

import minibass
from minibass import attention
from minibass.attention import BACKENDS, FORWARDS, default_backend, resolve_backend, triton_available
from minibass.model import Decoder, ModelConfig

CONFIG = ModelConfig(vocab_size=17, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)


def ragged_step(model, backend):
    """A prefill, then a ragged step with an idle sequence."""
    cache = model.init_cache(3, 32)
    model(torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([2, 3, 1]), cache, attention=backend)
    return model(torch.tensor([7, 8, 9, 10]), torch.tensor([3, 0, 1]), cache, attention=backend)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_layers_never_revalidate(backend, monkeypatch):
    """check_inputs runs in a public backend call, never in the decoder's layers."""
    calls = []
    for fn in BACKENDS.values():  # each backend module's own reference to check_inputs
        module = sys.modules[fn.__module__]
        original = module.check_inputs
        monkeypatch.setattr(module, "check_inputs", lambda *a, _f=original: calls.append(1) or _f(*a))
    torch.manual_seed(0)
    model = Decoder(CONFIG).eval()
    ragged_step(model, backend)
    assert calls == [], f"{len(calls)} check_inputs calls in 2 forward steps of {CONFIG.num_hidden_layers} layers"
    q, k = torch.randn(3, 4, 8), torch.randn(2, 2, 5, 8)
    BACKENDS[backend](q, k, k, torch.tensor([1, 2]), torch.tensor([4, 5]))  # the public call does validate
    assert calls == [1]


@pytest.mark.parametrize("backend", ["naive", "padded", "split"])
def test_a_forward_step_reads_no_device_value(backend):
    """Run the whole decoder on the meta device: tensors there have shapes but no values, so
    anything that reads a device value into Python (.item(), .tolist(), int(t), bool(t), a
    data-dependent shape) raises. On a GPU each of those would be a host synchronisation. (The
    ragged kernel cannot run on meta tensors; its wrapper reads only shapes and strides.)"""
    with torch.device("meta"):
        model = Decoder(CONFIG)
    logits = ragged_step(model, backend)
    assert logits.device.type == "meta" and logits.shape == (4, CONFIG.vocab_size)


def test_the_ragged_wrapper_reads_no_device_value(ragged_launches):
    """The same probe for ``ragged``, its kernel replaced by a recorder (no kernel runs on meta tensors):
    what the wrapper does around the launch (tile sizes, grid, strides, the launch's arguments) reads
    only shapes and the host values of the step's metadata. Needs no Triton."""
    launches = ragged_launches
    with torch.device("meta"):
        model = Decoder(CONFIG)
    logits = ragged_step(model, "ragged")
    assert logits.device.type == "meta" and logits.shape == (4, CONFIG.vocab_size)
    assert len(launches) == 2 * CONFIG.num_hidden_layers  # one launch per layer, two steps
    grid, args, constants = launches[-1]
    assert grid == (3, CONFIG.num_key_value_heads, 1)  # sequences, kv heads, row blocks
    assert (constants["BLOCK_M"], constants["BLOCK_D"]) == (16, 16)  # 3 queries x 2 heads per group; head dim 8


def test_the_meta_device_probe_catches_a_host_read(monkeypatch):
    """The companion of the test above: a backend that reads a device value fails there."""

    def syncing_padded(q, k_cache, v_cache, meta, scale):
        int(meta.kv_lens.max())  # a host read: a sync on a GPU
        return FORWARDS["padded"](q, k_cache, v_cache, meta, scale)

    monkeypatch.setitem(minibass.model.FORWARDS, "split", syncing_padded)
    with torch.device("meta"):
        model = Decoder(CONFIG)
    with pytest.raises(Exception, match="meta"):
        ragged_step(model, "split")


def no_python_scalar_writes(monkeypatch):
    """Makes ``t[index] = <Python number>`` raise. On a GPU such a write copies the number from
    the host first, a blocking copy; the meta device cannot see it (found on an H200, in BASS-PAD)."""
    original = torch.Tensor.__setitem__

    def checked(self, index, value):
        if isinstance(value, (bool, int, float)):
            raise AssertionError(f"a Python {type(value).__name__} written into a tensor: a host-to-device "
                                 "copy on a GPU (write a tensor made on the target's device)")
        return original(self, index, value)

    monkeypatch.setattr(torch.Tensor, "__setitem__", checked)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_forward_step_writes_no_python_number(backend, monkeypatch):
    torch.manual_seed(0)
    model = Decoder(CONFIG).eval()
    no_python_scalar_writes(monkeypatch)
    ragged_step(model, backend)


def test_the_python_number_probe_catches_such_a_write(monkeypatch):
    no_python_scalar_writes(monkeypatch)
    with pytest.raises(AssertionError, match="host-to-device"):
        torch.zeros(3)[torch.tensor([1])] = 0


def test_default_backend_per_device(monkeypatch):
    assert default_backend("cpu") == "padded"
    assert resolve_backend(None, "cpu") == "padded"
    assert resolve_backend("split", "cpu") == "split"
    monkeypatch.setattr(attention, "triton_available", lambda: True)
    assert default_backend("cuda") == "ragged"
    monkeypatch.setattr(attention, "triton_available", lambda: False)
    assert default_backend("cuda") == "padded"
    with pytest.raises(ValueError, match="attention must be one of"):
        resolve_backend("flash", "cpu")


def test_default_is_never_the_interpreted_kernel_on_a_cpu(monkeypatch):
    torch.manual_seed(0)
    model = Decoder(CONFIG).eval()
    monkeypatch.setitem(minibass.model.FORWARDS, "ragged", None)  # calling it would raise TypeError
    prompts = [[1, 2, 3], [4]]
    greedy = minibass.SamplingParams(temperature=0)
    default = minibass.generate(model, prompts, 5, sampling=greedy).tokens
    assert default == minibass.generate(model, prompts, 5, sampling=greedy, attention="padded").tokens
    assert minibass.speculative_generate(model, model, prompts, 5, sampling=greedy).tokens == default


@pytest.mark.skipif(not triton_available(), reason="the 'ragged' backend needs Triton, which installs on Linux only")
def test_kernel_offsets_are_64_bit():
    """A cache whose per-sequence stride fits in int32 while b * stride does not (2**30 elements per
    sequence, sequence 2 at element 2**31). int32 offsets would wrap and read far outside the
    tensor. Run in a subprocess, so that such a read fails this test instead of crashing pytest;
    the 6 GiB tensor is only reserved, never touched beyond a few pages."""
    script = textwrap.dedent("""
        import torch
        from minibass.attention import naive, ragged
        cache = torch.empty(3, 1, 2**26, 16, dtype=torch.float16)  # stride(0) = 2**30 elements
        assert cache.stride(0) == 2**30
        g = torch.Generator().manual_seed(0)
        for b in range(3):
            cache[b, 0, :8] = torch.randn(8, 16, generator=g).half()
        q, q_lens, kv_lens = torch.randn(3, 1, 16, generator=g).half(), torch.tensor([1, 1, 1]), torch.tensor([8, 8, 8])
        out = ragged(q, cache, cache, q_lens, kv_lens).double()
        small = cache[:, :, :8].double()
        ref = naive(q.double(), small, small, q_lens, kv_lens)
        print((out - ref).abs().max().item())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert float(done.stdout.strip()) <= 4e-3  # the float16 tolerance of test_attention


def test_phases_are_a_documented_seam():
    """The planted-bug tests swap phases through this seam; a default Phases() is the real loop."""
    phases = minibass.speculative.Phases()
    assert phases.rollback is minibass.speculative.rollback_phase
    assert replace(phases, rollback=print).draft is minibass.speculative.draft_phase
