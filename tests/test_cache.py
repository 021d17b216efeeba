"""Cache bookkeeping: any interleaving of ragged appends and per-sequence rollbacks leaves each
sequence's cache exactly as if its surviving tokens had been prefilled from scratch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from minibass import KVCache
from minibass.model import Decoder, ModelConfig

CONFIG = ModelConfig(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=4, max_position_embeddings=64)
CAPACITY = 24


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Decoder(CONFIG).double().eval()


@st.composite
def operations(draw):
    batch = draw(st.integers(1, 4))
    ops = []
    lengths = [0] * batch
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()) or max(lengths) == 0:
            room = [min(4, CAPACITY - 1 - n) for n in lengths]  # keep one slot for the final check
            q_lens = [draw(st.integers(0, r)) for r in room]
            tokens = [[draw(st.integers(0, CONFIG.vocab_size - 1)) for _ in range(q)] for q in q_lens]
            ops.append(("append", tokens))
            lengths = [n + q for n, q in zip(lengths, q_lens)]
        else:
            lengths = [draw(st.integers(0, n)) for n in lengths]
            ops.append(("truncate", list(lengths)))
    return batch, ops


def replay_and_compare_with_a_fresh_prefill(model, case, attention):
    """Runs the appends (with ``attention``) and truncations, then one more token per sequence, whose
    logits must equal a fresh prefill of the tokens that sequence kept, computed by the naive
    specification. A truncation leaves real keys and values of rejected tokens in the stale slots,
    where a backend that read past ``kv_lens`` would see them."""
    batch, ops = case
    cache = model.init_cache(batch, CAPACITY)
    kept = [[] for _ in range(batch)]  # the tokens each sequence should still have cached
    for kind, arg in ops:
        if kind == "append":
            model(torch.tensor([t for seq in arg for t in seq], dtype=torch.long),
                  torch.tensor([len(seq) for seq in arg]), cache, attention=attention)
            kept = [k + seq for k, seq in zip(kept, arg)]
        else:
            cache.truncate(arg)
            kept = [k[:n] for k, n in zip(kept, arg)]
        assert cache.lengths.tolist() == [len(k) for k in kept]
    probe = [(7 * b + 1) % CONFIG.vocab_size for b in range(batch)]
    logits = model(torch.tensor(probe), torch.ones(batch, dtype=torch.long), cache, attention=attention)
    for b in range(batch):
        fresh_tokens = kept[b] + [probe[b]]
        fresh = model(torch.tensor(fresh_tokens), torch.tensor([len(fresh_tokens)]), model.init_cache(1, CAPACITY),
                      attention="naive")
        torch.testing.assert_close(logits[b], fresh[-1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["naive", "padded", "split"])
@given(case=operations())
def test_append_and_truncate_match_a_fresh_prefill(model, case, attention):
    replay_and_compare_with_a_fresh_prefill(model, case, attention)


@pytest.mark.parametrize("attention", ["ragged"])  # (a parameter, so that it skips where Triton is missing)
@settings(max_examples=10)  # the kernel runs in Triton's interpreter: slow
@given(case=operations())
def test_append_and_truncate_match_a_fresh_prefill_with_the_ragged_kernel(model, case, attention):
    replay_and_compare_with_a_fresh_prefill(model, case, attention)


def test_truncate_refuses_to_grow():
    cache = KVCache(1, 2, 1, 8, 4)
    cache.lengths = torch.tensor([3, 5])
    with pytest.raises(ValueError, match="truncate: lengths must be in \\[0, current\\]"):
        cache.truncate([4, 5])
    with pytest.raises(ValueError, match="must have shape"):
        cache.truncate([1])
    for fractional in ([2.9, 4.5], torch.tensor([True, False]), torch.tensor([2.0, 4.0]), "abc", None, [2 ** 70, 0]):
        with pytest.raises(ValueError, match="truncate: lengths must be integers"):
            cache.truncate(fractional)
    cache.truncate(np.array([2, 4]))  # NumPy integers are integers
    assert cache.lengths.tolist() == [2, 4]


def test_truncate_does_not_alias_the_callers_lengths():
    cache = KVCache(1, 2, 1, 8, 4)
    cache.lengths = torch.tensor([3, 5])
    new = torch.tensor([2, 4])
    cache.truncate(new)
    new[0] = 0
    assert cache.lengths.tolist() == [2, 4]


def test_a_cache_needs_a_batch_and_a_capacity():
    cache = KVCache(2, 3, 1, 8, 4)
    assert (cache.batch_size, cache.capacity) == (3, 8)
    for batch, capacity in ((0, 8), (3, 0)):
        with pytest.raises(ValueError, match="capacity"):
            KVCache(1, batch, 1, capacity, 4)


def test_capacity_overflow_is_an_error(model):
    cache = model.init_cache(1, 4)
    with pytest.raises(ValueError, match="capacity 4 exceeded"):
        model(torch.arange(5), torch.tensor([5]), cache, attention="naive")
