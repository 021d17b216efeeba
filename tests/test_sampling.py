"""SamplingParams, probs() and the sampler: properties, and a G-test (the oracle's) with demonstrated power."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import example, given, strategies as st

import minibass
from minibass.oracle import stats
from minibass.sampling import SamplingParams, SeedStreams, greedy_tokens, probs, sample_from
from conftest import hf_tiny

ALPHA = 1e-6  # false-alarm rate of every statistical test in this file


@pytest.mark.parametrize("kwargs,message", [
    (dict(temperature=-0.5), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=-1), "top_k"), (dict(top_k=2.5), "top_k"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(temperature=True), "temperature"), (dict(top_p=True), "top_p"),  # bools are not numbers here
])
def test_invalid_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@st.composite
def logits_and_params(draw):
    vocab = draw(st.integers(1, 12))
    rows = draw(st.integers(1, 4))
    values = draw(st.lists(st.lists(st.floats(-8, 8), min_size=vocab, max_size=vocab), min_size=rows, max_size=rows))
    params = SamplingParams(temperature=draw(st.sampled_from([0.0, 0.3, 1.0, 2.0])),
                            top_k=draw(st.integers(0, vocab + 1)),
                            top_p=draw(st.sampled_from([1.0, 0.9, 0.5, 0.05])))
    return torch.tensor(values, dtype=torch.float64), params


@given(logits_and_params())
# Logits 1e-192 apart: their softmax rounds to a tie, and top-k keeps the larger logit, not the first index.
@example((torch.tensor([[-7.6390e-193, 0.0]], dtype=torch.float64), SamplingParams(temperature=0.3, top_k=1)))
def test_probs_properties(case):
    logits, params = case
    p = probs(logits, params)
    assert p.shape == logits.shape and p.dtype == torch.float64
    assert torch.allclose(p.sum(-1), torch.ones(len(p), dtype=torch.float64), atol=1e-12)
    assert (p >= 0).all()
    if params.greedy:
        assert ((p == 1).sum(-1) == 1).all() and (p.argmax(-1) == logits.argmax(-1)).all()
        return
    full = torch.softmax(logits / params.temperature, -1)
    for row, full_row in zip(p, full):
        support = row > 0
        assert full_row[support].max() == full_row.max()  # a most likely token always survives (any of a tie)
        # Every kept token is at least as likely as every dropped one.
        if (~support).any():
            assert full_row[support].min() >= full_row[~support].max()
        if 0 < params.top_k:
            kth = torch.sort(full_row, descending=True).values[min(params.top_k, len(full_row)) - 1]
            assert support.sum() <= (full_row >= kth).sum()  # ties with the k-th kept, nothing more
        if params.top_p < 1.0 and params.top_k == 0:
            kept_mass = full_row[support].sum()
            assert kept_mass >= params.top_p - 1e-12
            # Minimality: dropping the least likely kept token would fall short of top_p.
            assert kept_mass - full_row[support].min() < params.top_p + 1e-12
        # Kept tokens keep their relative odds.
        ratio = row[support] / full_row[support]
        assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-9)


def test_numpy_numbers_are_sampling_params():
    import numpy as np

    assert SamplingParams(temperature=np.float64(0.5), top_k=np.int64(3), top_p=np.float32(0.9)).top_k == 3


@pytest.mark.parametrize("row", [[0.5, float("nan"), 0.5], [0.0, float("inf"), 1.0], [0.0, 0.0, 0.0],
                                 [0.0, float("-inf"), 1.0], [float("inf")] * 3, [float("nan")] * 3])
def test_sample_from_refuses_a_row_it_cannot_sample_from(row):
    """Inverse-CDF sampling on a NaN, infinite or empty row would return V, out of range, or a token of
    probability 0: it raises instead, naming the row, wherever it lies among usable ones, large or small."""
    p = torch.tensor([[0.2, 0.3, 0.5], row, [1e300, 1e300, 0.0], [0.0, 1e-300, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="rows \\[1\\] of the distribution are NaN, infinite or all zero"):
        sample_from(p, torch.tensor([0.5] * 4, dtype=torch.float64))
    assert sample_from(p[[0, 2, 3]], torch.tensor([0.5] * 3, dtype=torch.float64)).tolist() == [2, 1, 1]


def test_sample_from_names_every_bad_row_and_takes_no_rows():
    p = torch.tensor([[float("nan"), 1.0], [0.5, 0.5], [0.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="rows \\[0, 2\\] of"):
        sample_from(p, torch.tensor([0.5] * 3, dtype=torch.float64))
    assert sample_from(torch.empty(0, 3), torch.empty(0)).shape == (0,)


def test_top_k_keeps_ties():
    p = probs(torch.log(torch.tensor([[0.4, 0.2, 0.2, 0.2]])), SamplingParams(top_k=2))
    assert (p > 0).sum() == 4  # the 2nd-largest value is tied three ways: all are kept


@given(st.lists(st.floats(0, 1), min_size=2, max_size=9), st.floats(0, 1, exclude_max=True))
def test_sample_from_never_returns_a_zero_probability_token(weights, u):
    p = torch.tensor(weights, dtype=torch.float64)
    if p.sum() == 0:
        p[0] = 1.0
    token = sample_from(p[None], torch.tensor([u]))[0]
    assert p[token] > 0


# --- the sampler against the exact distribution of two tokens, by a G-test ----------------------

PROMPT = [3, 1, 4]


@pytest.fixture(scope="module")
def tiny_vocab_model(tmp_path_factory):
    hf = hf_tiny("llama", vocab_size=6, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, seed=3)
    with torch.no_grad():
        hf.lm_head.weight.mul_(8)  # a peaked, far from uniform, next-token distribution
    folder = tmp_path_factory.mktemp("tiny_vocab")
    hf.save_pretrained(folder)
    return minibass.load_model(folder, dtype=torch.float64)


def exact_two_token_distribution(model, prompt, params):
    """P(t1, t2 | prompt) computed from the model's logits: [V, V] float64."""
    vocab = model.vocab_size

    def next_probs(context):
        logits = model(torch.tensor(context), torch.tensor([len(context)]), model.init_cache(1, 16),
                       attention="naive")
        return probs(logits[-1], params)

    p1 = next_probs(prompt)
    return torch.stack([p1[a] * next_probs(prompt + [a]) for a in range(vocab)]).numpy()


def g_test_pvalue(observed_pairs, exact):
    """G-test of observed (t1, t2) pairs against the exact joint [V, V] (the oracle's, small cells pooled)."""
    return stats.g_test(Counter(observed_pairs), stats.table_events(torch.as_tensor(exact))).pvalue


N_SAMPLES = 3000


def sampled_pairs(model, params, seed):
    result = minibass.generate(model, [PROMPT] * N_SAMPLES, 2, sampling=params, seed=seed, attention="naive")
    return [tuple(t) for t in result.tokens]


PARAMS = [SamplingParams(temperature=0.7), SamplingParams(temperature=1.3, top_k=3),
          SamplingParams(temperature=1.3, top_p=0.9)]


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_sampler_matches_exact_two_token_distribution(tiny_vocab_model, params):
    exact = exact_two_token_distribution(tiny_vocab_model, PROMPT, params)
    pvalue = g_test_pvalue(sampled_pairs(tiny_vocab_model, params, seed=11), exact)
    assert pvalue > ALPHA, f"p-value {pvalue:.2e}"


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_the_g_test_catches_a_sampler_that_ignores_the_warping(tiny_vocab_model, params):
    """Power: the same test, fed samples drawn at plain temperature 1, must reject, and not only
    because top-k or top-p samples fall outside the support: the G statistic on the possible
    events alone rejects too."""
    exact = stats.table_events(torch.as_tensor(exact_two_token_distribution(tiny_vocab_model, PROMPT, params)))
    observed = Counter(sampled_pairs(tiny_vocab_model, SamplingParams(), seed=11))
    possible, _ = stats.split_impossible(observed, exact)
    pvalue, on_possible = stats.g_test(observed, exact).pvalue, stats.g_test(possible, exact).pvalue
    print(f"broken sampler ({params} ignored): p = {pvalue:.2e}, on the possible events alone {on_possible:.2e}")
    assert pvalue < ALPHA and on_possible < ALPHA


def test_ignoring_top_p_at_temperature_1_is_caught_by_its_impossible_events(tiny_vocab_model):
    """At temperature 1, top-p keeps the relative odds of the tokens it keeps, so a sampler that ignores
    it draws the kept pairs in nearly the right proportions: only the pairs outside the support give it
    away, and the test rejects on those (p = 0)."""
    params = SamplingParams(top_p=0.8)
    exact = stats.table_events(torch.as_tensor(exact_two_token_distribution(tiny_vocab_model, PROMPT, params)))
    observed = Counter(sampled_pairs(tiny_vocab_model, SamplingParams(), seed=11))
    _, impossible = stats.split_impossible(observed, exact)
    result = stats.g_test(observed, exact)
    assert sum(impossible.values()) > 0 and result.impossible is not None and result.pvalue == 0.0
    assert g_test_pvalue(sampled_pairs(tiny_vocab_model, params, seed=11),
                         exact_two_token_distribution(tiny_vocab_model, PROMPT, params)) > ALPHA




def transformers_warped(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """transformers' own warpers, in generate's order (temperature, top-k, top-p), then the softmax."""
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    scores = TemperatureLogitsWarper(params.temperature)(None, logits.clone())
    if params.top_k:
        scores = TopKLogitsWarper(params.top_k)(None, scores)
    if params.top_p < 1.0:
        scores = TopPLogitsWarper(params.top_p)(None, scores)
    return torch.softmax(scores, -1)


@pytest.mark.parametrize("params", [SamplingParams(top_p=0.5), SamplingParams(top_p=0.95), SamplingParams(top_k=2),
                                    SamplingParams(temperature=0.7, top_k=3, top_p=0.8),
                                    SamplingParams(temperature=2.0, top_k=50, top_p=0.95)])
def test_the_filters_keep_the_tokens_transformers_keeps(params):
    """On rows without ties at the top-p boundary (where transformers' unstable sort decides, see
    ``probs``); top-k's ties are kept by both."""
    g = torch.Generator().manual_seed(0)
    tied_for_top_k = torch.tensor([[2.0, 1.0, 1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    narrow = torch.randn(64, 12, generator=g, dtype=torch.float64)
    wide = torch.randn(16, 32000, generator=g, dtype=torch.float64) * 3  # a long tail of small probabilities
    for logits in ((tied_for_top_k,) if params.top_p == 1.0 else ()) + (narrow, wide):
        ours, theirs = probs(logits, params), transformers_warped(logits, params)
        assert torch.equal(ours > 0, theirs > 0)
        assert torch.allclose(ours, theirs, atol=1e-12)


def test_top_k_compares_the_scaled_logits_not_their_rounded_probabilities():
    """0 and 2e-8 are two logits, but one float32 probability: top-1 keeps one token, as transformers does."""
    logits = torch.tensor([[0.0, 2e-8, -1.0]])
    assert (probs(logits, SamplingParams(top_k=1)) > 0).tolist() == [[False, True, False]]
    assert (transformers_warped(logits, SamplingParams(top_k=1)) > 0).tolist() == [[False, True, False]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("vocab", [2, 3, 6, 10, 16, 17, 100, 1000, 32000, 128256, 256000])
def test_top_p_keeps_the_smallest_set_at_exact_ties(dtype, vocab):
    """Equal logits: the smallest set reaching top_p has ceil(top_p * V) tokens, the earlier indices
    first. Rounding must not decide an exact boundary (0.5 of 6 tokens is 3 of them, not 4)."""
    from fractions import Fraction

    row = torch.zeros(1, vocab, dtype=dtype)
    for top_p in (0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.75, 0.8, 0.9, 0.95, 0.99):
        kept = (probs(row, SamplingParams(top_p=top_p)) > 0)[0]
        want = max(1, -int(-Fraction(str(top_p)) * vocab // 1))  # ceil(top_p * V)
        assert kept.sum() == want and kept[:want].all(), (top_p, int(kept.sum()), want)


def test_top_p_sums_in_float64_at_a_large_vocabulary():
    """float32 probabilities over 32,000 tokens: the kept set is the one float64 arithmetic gives."""
    logits = torch.randn(32, 32000, generator=torch.Generator().manual_seed(1)) * 3
    for top_p in (0.999, 0.9999):
        params = SamplingParams(top_p=top_p)
        assert torch.equal(probs(logits, params) > 0, probs(logits.double(), params) > 0)


def test_top_p_mass_exactly_at_the_slackened_threshold_counts_as_reaching_it():
    logits = torch.tensor([[0.3, 0.0, -0.4]], dtype=torch.float64)
    p = probs(logits)[0]
    running = torch.sort(p, descending=True, stable=True).values.cumsum(-1)
    total, first = float(running[-1]), float(running[0])
    slack = max(1e-12, 4 * 3 * torch.finfo(torch.float64).eps)  # probs' own slack for V = 3
    top_p = first / (total * (1 - slack))
    for _ in range(200):  # the top_p whose threshold is bit for bit the first token's mass
        threshold = top_p * total * (1 - slack)
        if threshold == first:
            break
        top_p = math.nextafter(top_p, 0.0 if threshold > first else 1.0)
    assert top_p * total * (1 - slack) == first
    kept = probs(logits, SamplingParams(top_p=top_p)) > 0
    assert kept.tolist() == [[True, False, False]]  # the first token's mass reaches top_p


@pytest.mark.parametrize("logits", [
    torch.tensor([[0.0, 1e9, 2e9]], dtype=torch.float64),  # logits / 1e-300 would overflow to inf
    torch.tensor([[1.0, 2.0, 3.0]]),  # float32, where 1e-300 rounds to 0
])
def test_a_tiny_temperature_on_any_logits_tends_to_greedy_instead_of_nan(logits):
    p = probs(logits, SamplingParams(temperature=1e-300))
    assert p.dtype == logits.dtype and p.tolist() == [[0.0, 0.0, 1.0]]


def test_sample_from_falls_back_to_the_last_token_with_mass_when_the_target_rounds_onto_the_total():
    p = torch.tensor([[5e-324, 0.0, 0.0]], dtype=torch.float64)  # a subnormal total: u * total rounds onto it
    assert sample_from(p, torch.tensor([0.9], dtype=torch.float64)).tolist() == [0]


@pytest.mark.parametrize("seed", [2 ** 63, [2 ** 63]])
def test_a_seed_of_2_to_the_63_is_refused(seed):
    with pytest.raises(ValueError, match="seed must be"):
        SeedStreams(seed, 1)


def test_uniform_ragged_draws_from_the_named_rows_streams():
    got = SeedStreams(0, 3).uniform_ragged([2, 0], [2, 1], 3)
    ref = SeedStreams(0, 3)
    want = torch.zeros(2, 3, dtype=torch.float64)
    want[0, :2], want[1, :1] = ref.uniform([2], 2)[0], ref.uniform([0], 1)[0]
    assert torch.equal(got, want)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_greedy_tokens_name_each_row_whose_maximum_is_not_finite(bad, dtype):
    """A NaN anywhere in a row, +inf anywhere, or -inf everywhere makes its maximum non-finite: those rows are
    named (the first five), the others decode to the first index of their maximum."""
    logits = torch.randn(8, 11, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert torch.equal(greedy_tokens(logits), logits.float().argmax(-1))
    rows = [1, 3, 4, 5, 6, 7]
    for row in rows:
        if bad == -float("inf"):
            logits[row] = bad
        else:
            logits[row, row] = bad
    with pytest.raises(ValueError, match=r"cannot decode greedily: rows \[1, 3, 4, 5, 6\] of the logits"):
        greedy_tokens(logits)
    with pytest.raises(ValueError, match=r"rows \[0\]"):
        greedy_tokens(logits[7])  # one row: [V] -> a 0-d token


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])  # float16 sums in float32: below
def test_greedy_tokens_take_finite_maxima_whose_sum_overflows(dtype):
    """The check reads one sum of the maxima (in float32 at least); large finite maxima overflow it, and are still
    decoded, not refused."""
    top = torch.finfo(dtype).max
    logits = torch.full((3, 5), top / 2, dtype=dtype)
    logits[:, 2] = top
    assert not math.isfinite(logits.max(-1).values.sum(dtype=torch.promote_types(dtype, torch.float32)))
    assert greedy_tokens(logits).tolist() == [2, 2, 2]


def test_greedy_tokens_sum_half_precision_maxima_in_float32(monkeypatch):
    """Thousands of float16 rows with maxima of 30 overflow a float16 sum (65504) but not the float32 one: the
    check stays one sum and one read (the row check, torch.isfinite, is not reached), and the tokens come back."""
    logits = torch.zeros(3000, 4, dtype=torch.float16)
    logits[:, 1] = 30
    assert not math.isfinite(logits.max(-1).values.sum())
    monkeypatch.setattr(torch, "isfinite", lambda t: pytest.fail("the row check ran"))
    assert greedy_tokens(logits).tolist() == [1] * 3000
