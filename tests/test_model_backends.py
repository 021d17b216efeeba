"""The decoder gives the same logits and the same greedy tokens with every attention backend."""

from __future__ import annotations

import sys

import pytest
import torch

import minibass
from minibass.attention import BACKENDS
from minibass.attention.ragged import _Kernels
from conftest import hf_tiny


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("backends")
    hf_tiny("llama", seed=4).save_pretrained(folder)
    return minibass.load_model(folder)


def ragged_logits(model, attention):
    """Prefill a ragged batch, then a ragged speculative-like step with an idle sequence."""
    g = torch.Generator().manual_seed(0)
    cache = model.init_cache(3, 40)
    first = model(torch.randint(0, 97, (4 + 17 + 1,), generator=g), torch.tensor([4, 17, 1]), cache,
                  attention=attention)
    second = model(torch.randint(0, 97, (3 + 5,), generator=g), torch.tensor([3, 0, 5]), cache, attention=attention)
    return torch.cat([first, second])


@pytest.mark.parametrize("attention", sorted(set(BACKENDS) - {"naive"}))
def test_logits_and_greedy_tokens_agree_across_backends(model, attention):
    assert (ragged_logits(model, attention) - ragged_logits(model, "naive")).abs().max() <= 1e-5
    prompts = [[5, 3, 8], [1], [9, 9, 9, 9, 2, 7, 4]]
    greedy = minibass.SamplingParams(temperature=0)
    ref = minibass.generate(model, prompts, 10, sampling=greedy, attention="naive").tokens
    assert minibass.generate(model, prompts, 10, sampling=greedy, attention=attention).tokens == ref


def test_ragged_without_triton_fails_clearly_and_the_others_still_work(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    for module in ("minibass.attention.triton_shim", "minibass.attention.ragged_kernel"):
        monkeypatch.delitem(sys.modules, module, raising=False)  # imported afresh, as where Triton is missing
    monkeypatch.setattr(_Kernels, "interpreted", None)
    with pytest.raises(ImportError, match="needs Triton"):
        ragged_logits(model, "ragged")
    ragged_logits(model, "padded")
