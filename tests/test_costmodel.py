"""The cost model (minibass/costmodel.py): its arithmetic against hand counts and against the models it describes."""

from __future__ import annotations

import math

import pytest

from minibass import costmodel as cm
from minibass.draft_length import expected_tokens

SHAPE = cm.ModelShape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100, tied=True)


def test_parameter_count_equals_the_real_model(tmp_path):
    """Weights counted by the model equal a transformers Llama of that shape (norms aside: 2 L d + d)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    norms = (2 * config.num_hidden_layers + 1) * config.hidden_size
    assert cm.ModelShape.from_config(config) == SHAPE
    assert SHAPE.params == sum(p.numel() for p in model.parameters()) - norms
    # A head dim the checkpoint gives, other than hidden / heads (32, not 16), changes the q, k, v, o weights.
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, head_dim=32)
    shape = cm.ModelShape.from_config(config)
    assert shape.head_dim == 32
    assert shape.params == sum(p.numel() for p in LlamaForCausalLM(config).parameters()) - norms


def test_flops_and_bytes_by_hand():
    d, D, L = 64, 16, 2
    per_layer = d * 4 * D * 2 + d * 2 * D * 2 + 3 * d * 128
    assert SHAPE.layer_params == per_layer
    # 3 sequences, 2 new tokens each, 5 cached: matmuls + attention over (5 + 1.5) keys on average per token
    assert SHAPE.flops(3, 2, 5) == 2 * 6 * (L * per_layer + 100 * d) + 4 * L * 4 * D * 6 * (5 + 1.5)
    assert SHAPE.bytes(3, 2, 5) == 2 * (L * per_layer + 100 * d + 2 * L * 2 * D * 3 * 7)


def test_roofline_step_time_and_critical_batch():
    hw = cm.Hardware("toy", peak_flops=1e12, bandwidth=1e10, call_overhead=1e-4, layer_overhead=1e-5)
    t = cm.step_time(SHAPE, hw, batch=4, tokens=1, context=0)
    assert t == pytest.approx(max(SHAPE.flops(4, 1, 0) / 1e12, SHAPE.bytes(4, 1, 0) / 1e10) + 1e-4 + 2e-5)
    b = cm.critical_batch(SHAPE, hw)
    compute = lambda n: SHAPE.flops(n, 1, 0) / hw.peak_flops >= SHAPE.bytes(n, 1, 0) / hw.bandwidth  # noqa: E731
    assert compute(b) and not compute(b - 1)
    assert hw.ridge_point == 100


def test_gpu_spec_sheets_and_the_7b_critical_batch():
    """Decode of a 7B model (bf16) turns compute-bound near the ridge point: about ridge / 1 FLOP per byte."""
    llama7b = cm.ModelShape(32, 4096, 32, 32, 11008, 32000, tied=False)
    for hw in cm.GPUS:
        assert hw.source.startswith("https://")
        assert 0.9 * hw.ridge_point <= cm.critical_batch(llama7b, hw) <= 1.1 * hw.ridge_point


def test_critical_batch_is_none_when_no_batch_is_compute_bound():
    """A long cache makes each sequence's bytes outweigh its FLOPs: the intensity levels off below the ridge."""
    llama7b = cm.ModelShape(32, 4096, 32, 32, 11008, 32000, tied=False)
    compute = lambda n, hw: llama7b.flops(n, 1, 128) / hw.peak_flops >= llama7b.bytes(n, 1, 128) / hw.bandwidth  # noqa: E731
    assert cm.critical_batch(llama7b, cm.H100, context=128) is None
    assert not compute(10 ** 9, cm.H100)
    b = cm.critical_batch(llama7b, cm.A100, context=128)  # a lower ridge point: the FLOPs still win
    assert b is not None and compute(b, cm.A100) and not compute(b - 1, cm.A100)
    with pytest.raises(ValueError, match="tokens >= 1"):
        cm.critical_batch(llama7b, cm.A100, tokens=0)


@pytest.mark.parametrize("make, match", [
    (lambda: cm.Hardware("x", float("nan"), 1e9), "finite"),
    (lambda: cm.Hardware("x", 1e12, float("inf")), "finite"),
    (lambda: cm.Hardware("x", 1e12, 1e9, call_overhead=-1e-3), "overheads >= 0"),
    (lambda: cm.ModelShape(2, 64, 0, 1, 128, 100), "heads"),
    (lambda: cm.ModelShape(2, 64, 4, 3, 128, 100), "multiple of kv_heads"),
    (lambda: cm.ModelShape(2, 64.0, 4, 2, 128, 100), "hidden"),
    (lambda: cm.ModelShape(2, 64, 4, 2, 128, 100, head_dim=0), "head_dim"),
])
def test_shapes_and_hardware_that_describe_nothing_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_speculative_speedup_formula():
    """Numbers worked out by hand: E[tokens | 0.7, 4] = (1 - 0.7 ** 5) / 0.3 = 2.7731."""
    assert expected_tokens(0.7, 4) == pytest.approx(2.7731)
    # A regular step 10, a verify 12, a draft call 1: 2.7731 * 10 / (12 + 4 * 1).
    assert cm.speedup_from_costs(10.0, 12.0, 1.0, k=4, alpha=0.7) == pytest.approx(1.7331875)
    assert cm.speedup_from_costs(1.0, 1.0, 0.0, k=4, alpha=1.0) == 5  # free draft, all accepted
    # Fixed costs only (1 ms a call, 1 ms a layer): target step 3 ms whatever its tokens, draft call 2 ms,
    # so 2.7731 * 3 / (3 + 4 * 2).
    hw = cm.Hardware("overheads only", 1e30, 1e30, call_overhead=1e-3, layer_overhead=1e-3)
    draft = cm.ModelShape(1, 32, 2, 1, 64, 100)
    assert cm.speculative_speedup(SHAPE, draft, hw, batch=8, k=4, alpha=0.7) == pytest.approx(2.7731 * 3 / 11)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.55, 0.9, 0.999])
def test_alpha_from_accepted_inverts_the_expected_prefix(alpha):
    k = 4
    assert cm.alpha_from_accepted(expected_tokens(alpha, k) - 1, k) == pytest.approx(alpha, abs=1e-6)
    with pytest.raises(ValueError):
        cm.alpha_from_accepted(k + 0.5, k)


def test_calibrate_recovers_overheads():
    hw = cm.Hardware("toy", 1e15, 1e15)
    true = cm.Hardware("toy", 1e15, 1e15, call_overhead=2e-4, layer_overhead=3e-5)
    shapes = [cm.ModelShape(n, 64, 4, 2, 128, 100) for n in (1, 4, 12)]
    fitted = cm.calibrate(hw, [(s, 8, 1, 16, cm.step_time(s, true, 8, 1, 16)) for s in shapes])
    assert fitted.call_overhead == pytest.approx(2e-4, rel=1e-6)
    assert fitted.layer_overhead == pytest.approx(3e-5, rel=1e-6)
    with pytest.raises(ValueError):
        cm.calibrate(hw, [])


def test_calibrate_fits_through_the_origin_when_the_free_line_starts_below_it():
    """Overheads 0 s at 2 layers and 0.1 s at 12: the free line has intercept -0.02; both >= 0, the least-squares
    fit is the line through the origin, slope 1.2 / 148 (not the free slope 0.01 with its intercept cut to 0)."""
    hw = cm.Hardware("toy", 1e15, 1e15)
    shapes = [cm.ModelShape(n, 64, 4, 2, 128, 100) for n in (2, 12)]
    fitted = cm.calibrate(hw, [(s, 8, 1, 16, cm.step_time(s, hw, 8, 1, 16) + y) for s, y in zip(shapes, (0.0, 0.1))])
    assert fitted.call_overhead == 0 and fitted.layer_overhead == pytest.approx(1.2 / 148, rel=1e-9)


def test_invalid_hardware_is_refused():
    with pytest.raises(ValueError):
        cm.Hardware("bad", 0, 1)


def test_measure_cpu_gives_positive_finite_numbers():
    cpu = cm.measure_cpu(size=64, megabytes=4, reps=2)
    assert math.isfinite(cpu.peak_flops) and cpu.peak_flops > 0 and cpu.bandwidth > 0


def test_verify_cost_script_prints_one_row_per_token_count(save_hf, capsys):
    """scripts/verify_cost.py on a tiny checkpoint: one row per token count, the 1-token call as 1.00."""
    from conftest import hf_tiny, script as load_script

    folder = save_hf(hf_tiny())
    script = load_script("verify_cost")
    script["main"](["--target", str(folder), "--batch", "2", "--tokens", "1", "3", "--rounds", "1", "--reps", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["1"], ["3"])]
    assert [row[0] for row in rows] == ["1", "3"]
    assert rows[0][2] == "1.00" and float(rows[1][1]) > 0 and len(rows[1]) == 7
    with pytest.raises(ValueError, match="include 1"):
        script["main"](["--target", str(folder), "--tokens", "2", "3"])
