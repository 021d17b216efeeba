"""The decoder matches transformers: full-sequence logits, incremental ragged decoding, greedy generate."""

from __future__ import annotations

import pytest
import torch

import minibass
from conftest import hf_tiny

FP32_TOL = 1e-4  # the bound minibass promises for float32 logits against transformers

FAMILIES = [
    pytest.param("llama", {}, id="llama-gqa-untied"),
    pytest.param("llama", dict(tie_word_embeddings=True, num_key_value_heads=6), id="llama-mha-tied"),
    pytest.param("llama", dict(num_key_value_heads=1, hidden_size=40, num_attention_heads=5, vocab_size=61),
                 id="llama-mqa-odd"),
    # head_dim 64: three of its rotary wavelengths (2 pi theta^(2i/64), i = 3, 4, 5) fall in the band
    # [64 / 4, 64 / 1] that Llama 3 interpolates between scaled and unscaled, so the band is computed.
    pytest.param("llama", dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                               rope_theta=500000.0, head_dim=64), id="llama3-rope-scaling"),
    pytest.param("llama", dict(attention_bias=True, head_dim=16), id="llama-bias-explicit-head-dim"),
    pytest.param("mistral", dict(sliding_window=None), id="mistral"),
    pytest.param("qwen2", dict(tie_word_embeddings=True), id="qwen2-bias-tied"),
]


def random_prompts(lengths, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize("kind,overrides", FAMILIES)
def test_full_sequence_logits_match_transformers(kind, overrides, save_hf):
    hf = hf_tiny(kind, **overrides)
    model = minibass.load_model(save_hf(hf))
    (prompt,) = random_prompts([37], hf.config.vocab_size)
    ref = hf(torch.tensor([prompt])).logits[0]  # (T, V)
    cache = model.init_cache(1, 64)
    ours = model(torch.tensor(prompt), torch.tensor([len(prompt)]), cache, attention="naive")
    assert (ours - ref).abs().max().item() <= FP32_TOL
    assert cache.lengths.tolist() == [len(prompt)]


@pytest.mark.parametrize("kind,overrides", FAMILIES)
def test_incremental_ragged_decoding_matches_transformers(kind, overrides, save_hf):
    """Prefill a ragged batch, then feed ragged chunks (some sequences idle) through the cache."""
    hf = hf_tiny(kind, **overrides)
    model = minibass.load_model(save_hf(hf))
    lengths = [5, 1, 12]
    chunks = [[3, 0, 2], [1, 4, 0], [0, 1, 1]]  # new tokens per sequence at each later step
    total = [n + sum(c[b] for c in chunks) for b, n in enumerate(lengths)]
    seqs = random_prompts(total, hf.config.vocab_size, seed=1)
    cache = model.init_cache(3, 32)
    steps = [lengths] + chunks
    done = [0, 0, 0]
    for q_lens in steps:
        tokens = [t for b in range(3) for t in seqs[b][done[b]:done[b] + q_lens[b]]]
        logits = model(torch.tensor(tokens), torch.tensor(q_lens), cache, attention="naive")
        start = 0
        for b in range(3):
            if q_lens[b]:
                end = done[b] + q_lens[b]
                ref = hf(torch.tensor([seqs[b][:end]])).logits[0, done[b]:end]
                assert (logits[start:start + q_lens[b]] - ref).abs().max().item() <= FP32_TOL
            start += q_lens[b]
            done[b] += q_lens[b]
    assert cache.lengths.tolist() == total


@pytest.mark.parametrize("kind,overrides", [FAMILIES[0], FAMILIES[5], FAMILIES[6]])
def test_greedy_generate_matches_transformers(kind, overrides, save_hf):
    hf = hf_tiny(kind, **overrides)
    model = minibass.load_model(save_hf(hf))
    prompts = random_prompts([3, 11, 1, 6], hf.config.vocab_size, seed=2)
    ours = minibass.generate(model, prompts, 12, sampling=minibass.SamplingParams(temperature=0),
                             attention="naive")
    hf.generation_config.eos_token_id = None  # run all 12 steps, as minibass does without eos_token_id
    for prompt, tokens in zip(prompts, ours.tokens):
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert tokens == ref[0, len(prompt):].tolist()


def test_float64_and_bfloat16_load(save_hf):
    hf = hf_tiny("llama")
    folder = save_hf(hf)
    m64 = minibass.load_model(folder, dtype=torch.float64)
    m16 = minibass.load_model(folder, dtype=torch.bfloat16)
    assert m64.lm_head.weight.dtype == torch.float64 and m16.lm_head.weight.dtype == torch.bfloat16
    prompt = torch.tensor(random_prompts([9], hf.config.vocab_size)[0])
    ref = hf(prompt[None]).logits[0].double()
    out64 = m64(prompt, torch.tensor([9]), m64.init_cache(1, 16), attention="naive")
    out16 = m16(prompt, torch.tensor([9]), m16.init_cache(1, 16), attention="naive")
    assert out64.dtype == torch.float64 and (out64 - ref).abs().max() <= FP32_TOL
    assert (out16.double() - ref).abs().max() <= 0.15  # bf16 keeps ~3 significant digits through 2 layers


def test_max_seq_len_is_max_position_embeddings(save_hf):
    model = minibass.load_model(save_hf(hf_tiny("llama", max_position_embeddings=40)))
    assert model.max_seq_len == 40


def test_rope_reads_tables_built_once_and_regrown(save_hf):
    """Decoder.rope gives exactly rope_tables' values, grows its tables when a position needs it, and
    rebuilds them for another dtype."""
    from minibass.model import rope_tables

    model = minibass.load_model(save_hf(hf_tiny("llama", max_position_embeddings=2048)))
    tables = []
    for length, dtype in ((256, torch.float32), (300, torch.float32), (2048, torch.float32), (10, torch.float64)):
        positions = torch.tensor([0, 5, 3, length // 2, length - 1])
        got = model.rope(positions, length, dtype)
        want = rope_tables(positions, model.inv_freq, dtype)
        assert all(g.dtype == dtype and torch.equal(g, w) for g, w in zip(got, want))
        assert len(model.rope_cache[0]) >= length and model.rope_cache[0].dtype == dtype
        tables.append(model.rope_cache[0])
    # Built once: 300 positions fit the table the first call built (512 long); 2048 and float64 rebuild it.
    assert tables[1] is tables[0] and tables[2] is not tables[1] and tables[3] is not tables[2]
    model.rope(torch.tensor([1]), 2, torch.float64)
    assert model.rope_cache[0] is tables[3]  # a shorter step reads the same table again
    assert len(model.rope_cache[0]) <= model.max_seq_len
