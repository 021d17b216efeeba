"""Shared fixtures: hypothesis profiles and tiny checkpoints the tests build themselves (no downloads)."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# `ci` (the default, used by `make test`): derandomized, bounded, reproducible.
# `thorough`: many more random examples for long local runs: HYPOTHESIS_PROFILE=thorough make test
settings.register_profile("ci", derandomize=True, max_examples=30, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# `make test` runs one pytest-xdist worker per core. PyTorch in each worker, and in every process a test
# starts (a chapter, the CLI), uses one thread, so that the workers do not compete for the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)



def pytest_collection_modifyitems(config, items):
    """Where Triton is not installed (it installs on Linux only), the tests of the 'ragged' backend skip."""
    from minibass.attention import triton_available

    if triton_available():
        return
    skip = pytest.mark.skip(reason="the 'ragged' backend needs Triton, which installs on Linux only")
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params.values()
        if any(isinstance(value, str) and value == "ragged" for value in params or ()):
            item.add_marker(skip)


@pytest.fixture
def ragged_launches(monkeypatch) -> list:
    """The 'ragged' backend's kernel replaced by a recorder (no kernel runs): each launch appends
    ``(grid, args, constants)``, as ``kernel[grid](*args, **constants)`` would have received them."""
    from minibass.attention.ragged import _Kernels

    launches = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **constants: launches.append((grid, args, constants))

    monkeypatch.setattr(_Kernels, "get", classmethod(lambda cls, on_cpu: Recorder()))
    return launches


ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def script(name: str) -> dict:
    """The globals of ``scripts/NAME.py``, loaded as a module (its ``main`` not run)."""
    return runpy.run_path(str(SCRIPTS / f"{name}.py"))


def hf_tiny(kind: str = "llama", *, seed: int = 0, **overrides):
    """A tiny random transformers model of the given family (float32, eval mode)."""
    import transformers

    classes = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }
    config_cls, model_cls = classes[kind]
    kwargs = dict(vocab_size=97, hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False)
    kwargs.update(overrides)
    torch.manual_seed(seed)
    config = config_cls(**kwargs)
    model = model_cls(config).eval()
    # Random init gives near-uniform logits; widen them so that sampling tests have something to see. Norm
    # weights and biases are drawn too (transformers starts them at 1 and 0, where a dropped one goes unseen).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.15)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.1)
    return model


@pytest.fixture
def save_hf(tmp_path):
    """save_hf(hf_model, name) -> folder with config.json + model.safetensors."""

    def save(model, name="ckpt", **kwargs):
        folder = tmp_path / name
        model.save_pretrained(folder, **kwargs)
        return folder

    return save
