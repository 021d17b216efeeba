"""Decoder, loading and TableLM at their edges: norm weights, defaults a config leaves out, the step checks,
TableLM against its formula. Nothing is downloaded: tiny random checkpoints."""

from __future__ import annotations

import warnings

import pytest
import torch

import minibass
from minibass import TableLM
from minibass.model import Decoder, ModelConfig, RMSNorm
from conftest import hf_tiny
from test_loading import edit_config

CFG = dict(vocab_size=11, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=4, max_position_embeddings=48)


def logits(model, ids):
    return model(ids, torch.tensor([len(ids)]), model.init_cache(1, len(ids)), attention="naive")


IDS = torch.tensor([5, 9, 2, 7, 1, 33, 60, 4, 8, 13, 21, 34])


# ---------------------------------------------------------------- model.py
def test_norm_weights_and_a_large_eps_match_transformers(save_hf):
    """An eps far from the default 1e-6, so that reading it wrongly shows (hf_tiny draws the norm weights)."""
    hf = hf_tiny("llama", rms_norm_eps=0.3)
    model = minibass.load_model(save_hf(hf))
    assert (logits(model, IDS) - hf(IDS[None]).logits[0]).abs().max() <= 1e-4


def test_rmsnorm_in_bfloat16_is_computed_in_float32_like_transformers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    ours, theirs = RMSNorm(64, 1e-6).to(torch.bfloat16), LlamaRMSNorm(64, eps=1e-6).to(torch.bfloat16)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        theirs.weight.copy_(ours.weight)
    x = (torch.randn(32, 64) * 3).to(torch.bfloat16)
    assert torch.equal(ours(x), theirs(x))


def test_a_tied_config_ties_the_head_of_a_decoder_built_directly():
    model = Decoder(ModelConfig(**CFG, tie_word_embeddings=True))
    assert model.lm_head.weight is model.model.embed_tokens.weight


@pytest.mark.parametrize("make_step,message", [
    (lambda m: m(torch.tensor([0] * 49), torch.tensor([49]), m.init_cache(1, 64)), "max_seq_len"),
    (lambda m: m(torch.tensor([11]), torch.tensor([1]), m.init_cache(1, 8)), "token ids must lie in"),
    (lambda m: m(torch.tensor([1] * 9), torch.tensor([9]), m.init_cache(1, 8)), "capacity"),
    (lambda m: m(torch.tensor([1]), torch.tensor([-1, 2]), m.init_cache(2, 8)), "must be >= 0"),
])
def test_decoder_step_checks_raise_value_error(make_step, message):
    model = Decoder(ModelConfig(**CFG)).eval()
    with pytest.raises(ValueError, match=message):
        make_step(model)


# ---------------------------------------------------------------- loading.py
def test_fields_a_config_may_leave_out_take_transformers_defaults(save_hf):
    """An old config.json without rope fields, tie_word_embeddings, num_key_value_heads or
    max_position_embeddings loads as transformers reads it (theta 10000, untied, MHA, 2048 positions)."""
    hf = hf_tiny("llama", num_key_value_heads=6)
    folder = save_hf(hf)
    edit_config(folder, rope_parameters=None, rope_theta=None, tie_word_embeddings=None, num_key_value_heads=None,
                max_position_embeddings=None)
    model = minibass.load_model(folder)
    assert model.max_seq_len == 2048 and model.config.num_key_value_heads == 6
    assert next(model.parameters()).dtype == torch.float32  # the default dtype
    assert (logits(model, IDS) - hf(IDS[None]).logits[0]).abs().max() <= 1e-4


def test_rope_type_wins_over_the_older_type_key(save_hf):
    folder = save_hf(hf_tiny("llama", head_dim=64))
    edit_config(folder, rope_parameters=None, rope_scaling={"rope_type": "linear", "factor": 2.0})
    want = logits(minibass.load_model(folder), IDS)
    edit_config(folder, rope_scaling={"rope_type": "linear", "type": "dynamic", "factor": 2.0})
    assert torch.equal(logits(minibass.load_model(folder), IDS), want)


def test_mlp_bias_checkpoints_match_transformers(save_hf):
    hf = hf_tiny("llama", mlp_bias=True)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "mlp" in name and p.dim() == 1:
                p.normal_(0, 0.5)
    model = minibass.load_model(save_hf(hf))
    assert (logits(model, IDS) - hf(IDS[None]).logits[0]).abs().max() <= 1e-4


def test_an_old_checkpoints_stored_rotary_inv_freq_is_ignored(save_hf):
    from safetensors.torch import load_file, save_file

    hf = hf_tiny("llama")
    folder = save_hf(hf)
    state = load_file(folder / "model.safetensors")
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    model = minibass.load_model(folder)
    assert (logits(model, IDS) - hf(IDS[None]).logits[0]).abs().max() <= 1e-4


def test_a_window_as_long_as_the_model_neither_warns_nor_caps(save_hf):
    folder = save_hf(hf_tiny("mistral", sliding_window=512, max_position_embeddings=512))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert minibass.load_model(folder).max_seq_len == 512


def test_a_boolean_sliding_window_is_refused(save_hf):
    folder = save_hf(hf_tiny("mistral"))
    edit_config(folder, sliding_window=True)
    with pytest.raises(ValueError, match="sliding_window must be a positive int or null"):
        minibass.load_model(folder)


# ---------------------------------------------------------------- table.py
def spec_logits(table, order, vocab, seq):
    """logits after each prefix seq[:i+1], straight from the module docstring's formula."""
    rows = []
    for i in range(len(seq)):
        ctx = [vocab] * order + seq[:i + 1]
        code = 0
        for t in ctx[len(ctx) - order:] if order else []:
            code = code * (vocab + 1) + t
        rows.append(table[(i + 1) % table.shape[0], code])
    return torch.stack(rows)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_table_lm_forward_follows_its_formula_over_ragged_steps(order):
    vocab, period = 3, 3
    model = TableLM.random(vocab, order=order, period=period, seed=5)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (5, 2, 7)]
    steps = [[2, 1, 3], [0, 1, 2], [3, 0, 2]]
    cache, done = model.init_cache(3, 8), [0, 0, 0]
    for q_lens in steps:
        toks = [t for b in range(3) for t in seqs[b][done[b]:done[b] + q_lens[b]]]
        out = model(torch.tensor(toks), torch.tensor(q_lens), cache)
        start = 0
        for b in range(3):
            end = done[b] + q_lens[b]
            want = spec_logits(model.table, order, vocab, seqs[b][:end])[done[b]:end]
            assert torch.equal(out[start:start + q_lens[b]], want)
            start, done[b] = start + q_lens[b], end
    assert cache.lengths.tolist() == [5, 2, 7]


def test_from_probs_gives_those_next_token_probabilities():
    p = torch.tensor([[0.2, 0.8, 0.0], [0.5, 0.25, 0.25]], dtype=torch.float64)
    model = TableLM.from_probs(p)
    out = model(torch.tensor([0, 1, 2]), torch.tensor([3]), model.init_cache(1, 3))  # positions 0, 1, 2
    assert torch.allclose(out.softmax(-1), p[[1, 0, 1]], atol=1e-12)


def test_table_cache_capacity_is_enforced():
    model = TableLM.random(3)
    with pytest.raises(ValueError, match="capacity"):
        model(torch.tensor([0, 1, 2]), torch.tensor([3]), model.init_cache(1, 2))


def test_rotary_angles_are_float64_exact_at_long_positions():
    """rope_tables promises angles in float64, exact for any position: check a position past 10^5."""
    import math

    from minibass.model import rope_inv_freq, rope_tables

    cfg = ModelConfig(**{**CFG, "head_dim": 64, "max_position_embeddings": 200_000})
    inv = rope_inv_freq(cfg)
    assert inv.dtype == torch.float64
    pos = 123_457
    cos, sin = rope_tables(torch.tensor([pos]), inv, torch.float64)
    want = torch.tensor([math.cos(pos * 10000.0 ** (-i / 64)) for i in range(0, 64, 2)], dtype=torch.float64)
    assert (cos[0, 0, :32] - want).abs().max() <= 1e-8


@pytest.mark.parametrize("changes", [
    pytest.param(dict(use_sliding_window=False, sliding_window=16, max_window_layers=1, layer_types=None),
                 id="use_sliding_window-off"),
    pytest.param(dict(use_sliding_window=True, sliding_window=16, max_window_layers=1,
                      layer_types=["full_attention", "full_attention"]), id="layer_types-without-sliding"),
])
def test_qwen2_configs_that_do_not_slide_keep_their_length(save_hf, changes):
    from transformers import AutoConfig

    folder = save_hf(hf_tiny("qwen2", max_position_embeddings=8192))
    edit_config(folder, **changes)
    hf_config = AutoConfig.from_pretrained(folder)  # what transformers makes of it: no layer slides
    assert "sliding_attention" not in hf_config.layer_types or not hf_config.use_sliding_window
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert minibass.load_model(folder).max_seq_len == 8192


def test_table_rows_without_a_finite_logit_are_refused():
    table = torch.zeros(1, 4, 3, dtype=torch.float64)
    table[0, 2] = float("-inf")
    with pytest.raises(ValueError, match="at least one finite logit"):
        TableLM(table, order=1)
