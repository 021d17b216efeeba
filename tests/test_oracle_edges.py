"""The oracle's edges: its statistics by hand, each row failing the sampler or kernel that breaks it, seeds and tolerances passed on.

Each test is fast (well under 10 s on 2 cores); none needs statistical power.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

import minibass
from minibass import oracle
from minibass.attention import BACKENDS
from minibass.oracle import known_bugs, stats
from minibass.oracle.sampler import K


# --- stats ---------------------------------------------------------------------------------------------------

def test_g_test_rejects_an_impossible_event_outright():
    test = stats.g_test(Counter({"a": 50, "b": 49, "z": 1}), {"a": 0.5, "b": 0.5})
    assert test.pvalue == 0.0 and test.statistic == float("inf") and test.impossible == "z"


def test_g_test_statistic_is_g_over_williams_factor_by_hand():
    observed, exact = Counter({"a": 60, "b": 40}), {"a": 0.5, "b": 0.5}
    g = 2 * (60 * np.log(60 / 50) + 40 * np.log(40 / 50))
    q = 1 + (100 * (1 / 50 + 1 / 50) - 1) / (6 * 100 * 1)  # Williams: 1 + (sum 1/p - 1) / (6 n dof)
    test = stats.g_test(observed, exact)
    assert test.dof == 1
    assert test.statistic == pytest.approx(g / q, rel=1e-12)
    assert test.pvalue == pytest.approx(scipy_stats.chi2.sf(g / q, 1), rel=1e-12)


def test_g_test_pools_small_cells_and_merges_a_small_pool():
    # n = 100: expected 50, 49, 0.5, 0.5: the two small cells pool to 1.0 (< 5), merged into the 49 cell: 2 cells.
    exact = {"a": 0.5, "b": 0.49, "c": 0.005, "d": 0.005}
    observed = Counter({"a": 50, "b": 48, "c": 1, "d": 1})
    test = stats.g_test(observed, exact)
    assert test.dof == 1 == stats.pooled_dof(exact, 100)
    exact2 = {"a": 0.5, "b": 0.46, "c": 0.02, "d": 0.02}  # n = 100: 50, 46, 2, 2 -> pool of 4 < 5, merged
    assert stats.g_test(Counter({"a": 50, "b": 46, "c": 2, "d": 2}), exact2).dof == 1
    exact3 = {"a": 0.5, "b": 0.44, "c": 0.03, "d": 0.03}  # n = 100: 50, 44, 3, 3 -> pool of 6 >= 5 kept
    assert stats.g_test(Counter({"a": 50, "b": 44, "c": 3, "d": 3}), exact3).dof == 2


def test_critical_value_is_the_chi_square_quantile():
    assert stats.critical_value(1, 0.05) == pytest.approx(3.841458820694124, rel=1e-9)
    assert stats.critical_value(10, 1e-6) == pytest.approx(scipy_stats.chi2.isf(1e-6, 10), rel=1e-12)


def test_williams_bound_bounds_the_factor_g_test_divides_by():
    for cells in (2, 5, 30):
        exact = {i: 1 / cells for i in range(cells)}
        observed = Counter({i: 5 + (1 if i == 0 else -1 if i == 1 else 0) for i in range(cells)})  # n = 5 * cells
        test = stats.g_test(observed, exact)
        raw = scipy_stats.power_divergence(np.array([observed[i] for i in range(cells)], float),
                                           np.full(cells, 5.0), lambda_="log-likelihood").statistic
        factor = raw / test.statistic  # 1 + (cells + 1) / (30 cells) here, every cell at 5
        assert 1 < factor <= stats.williams_bound(cells - 1)


def test_miss_probability_bounds_the_simulated_miss_rate_at_the_worst_perturbation():
    """The bound must not promise more power than a simulation at its worst case (two halves of mass 1/2)."""
    n, d, cells, alpha = 2_000, 0.05, 10, 1e-3
    base = np.full(cells, 1 / cells)
    shifted = np.where(np.arange(cells) < cells // 2, base * (1 + 2 * d), base * (1 - 2 * d))
    exact = dict(enumerate(base))
    rng = np.random.default_rng(0)
    runs = 400
    missed = sum(stats.g_test(Counter(dict(enumerate(rng.multinomial(n, shifted)))), exact).pvalue >= alpha
                 for _ in range(runs))
    bound = stats.miss_probability(n, d, cells - 1, alpha)
    assert 0.05 < bound < 0.95  # intermediate: the comparison means something
    assert missed / runs <= bound + 3 * np.sqrt(bound * (1 - bound) / runs)


def test_the_repeat_test_holds_for_samples_returned_sorted():
    """A correct engine may return its independent samples in any order (sorted, grouped): the test puts them in a
    random order first, so sorted draws pass as often as shuffled ones."""
    p = np.full(50, 1 / 50)
    fails = 0
    for run in range(20):
        draws = np.sort(np.random.default_rng(run).choice(50, 500, p=p))
        fails += not stats.repeat_test(draws, p, 0.05, seed=run).passed(0.05)
    assert fails <= 4


# --- verdict -------------------------------------------------------------------------------------------------

def test_a_verdict_fails_when_only_its_last_row_fails():
    v = oracle.Verdict("thing")
    v.add("a", "count", 0, 0)
    v.add("b", "count", 1, 0)
    assert not v.ok
    with pytest.raises(AssertionError):
        v.raise_for_failure()


def test_to_dict_carries_every_field_and_the_real_ok():
    v = oracle.Verdict("thing", notes=["a note"])
    v.add("a", "count", 1, 0, detail="why")
    d = json.loads(json.dumps(v.to_dict()))
    assert d["ok"] is False and d["notes"] == ["a note"] and d["subject"] == "thing" and "seconds" in d
    assert d["checks"] == [{"name": "a", "measured": "count", "statistic": 1.0, "threshold": 0.0, "passed": False,
                            "rule": "<=", "detail": "why"}]


# --- sampler -------------------------------------------------------------------------------------------------

def _cells(check) -> int:
    return int(re.search(r"G over (\d+) cells", check.measured).group(1))


def test_sampler_rows_are_tested_at_alpha_over_m():
    alpha = 1e-3
    verdict = oracle.check_sampler(known_bugs.textbook, rows=1_000, alpha=alpha)
    m = 4 * (K + 3)
    g_rows = [c for c in verdict.checks if "G over" in c.measured]
    assert len(g_rows) == m
    for c in g_rows:
        assert c.threshold == pytest.approx(stats.critical_value(_cells(c) - 1, alpha / m), rel=1e-12), c.name


def test_the_joint_test_sees_only_the_possible_events():
    """One impossible event among 2,000 rows fails the impossible-events row alone; the joint G-test, over the
    possible events, stays finite and passes."""
    def one_impossible(draft_tokens, draft_probs, target_probs, *, generator=None):
        n, y = known_bugs.textbook(draft_tokens, draft_probs, target_probs, generator=generator)
        zero = (target_probs[0, -1] == 0).nonzero()
        if len(zero):  # the top_k setup: row 0 emits every draft and then a bonus token of probability 0
            n, y = n.clone(), y.clone()
            n[0], y[0] = draft_tokens.shape[1], int(zero[0])
        return n, y

    verdict = oracle.check_sampler(one_impossible, rows=2_000)
    rows = {c.name: c for c in verdict.checks}
    assert rows["[top_k] impossible events"].statistic == 1 and not rows["[top_k] impossible events"].passed
    joint = rows["[top_k] joint G-test"]
    assert np.isfinite(joint.statistic) and joint.passed and "among the possible events" in joint.measured


def _accept_all(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Accepts every draft in the invariant probes (float64 inputs); right in the setups (float32)."""
    if draft_probs.dtype == torch.float32:
        return known_bugs.textbook(draft_tokens, draft_probs, target_probs, generator=generator)
    return torch.full((len(draft_tokens),), draft_tokens.shape[1]), target_probs[:, -1].argmax(-1)


def _reject_all(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Rejects the first draft in the invariant probes (float64 inputs); right in the setups (float32)."""
    if draft_probs.dtype == torch.float32:
        return known_bugs.textbook(draft_tokens, draft_probs, target_probs, generator=generator)
    return torch.zeros(len(draft_tokens), dtype=torch.long), target_probs[:, 0].argmax(-1)


def test_each_invariant_row_fails_the_sampler_breaking_it():
    accept = {c.name: c for c in oracle.check_sampler(_accept_all, rows=100).checks}
    assert not accept["never accepts x with p(x) = 0"].passed and accept["never accepts x with p(x) = 0"].statistic > 0
    assert accept["p == q accepts every draft"].passed
    reject = {c.name: c for c in oracle.check_sampler(_reject_all, rows=100).checks}
    assert not reject["p == q accepts every draft"].passed and reject["p == q accepts every draft"].statistic == 100
    assert reject["never accepts x with p(x) = 0"].passed


def test_a_sampler_whose_every_row_is_impossible_gets_a_verdict_not_a_crash():
    def accept_all(draft_tokens, draft_probs, target_probs, *, generator=None):
        return torch.full((len(draft_tokens),), draft_tokens.shape[1]), torch.zeros(len(draft_tokens), dtype=torch.long)

    verdict = oracle.check_sampler(accept_all, rows=100)  # raised ZeroDivisionError with no possible event left
    assert not verdict.ok
    assert any("impossible events" in c.name and c.statistic == 100 for c in verdict.checks)


def test_sampler_rows_below_100_are_a_usage_error():
    with pytest.raises(ValueError, match="rows must be an int >= 100"):
        oracle.check_sampler(known_bugs.textbook, rows=99)


def _recording(seen):
    def sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
        seen.append((draft_tokens.clone(), draft_probs.dtype, target_probs.dtype))
        return known_bugs.textbook(draft_tokens, draft_probs, target_probs, generator=generator)
    return sampler


def test_the_sampler_seed_reaches_the_drafts_and_setups_get_float32():
    a, b, c = [], [], []
    oracle.check_sampler(_recording(a), rows=100, seed=0)
    oracle.check_sampler(_recording(b), rows=100, seed=0)
    oracle.check_sampler(_recording(c), rows=100, seed=1)
    assert len(a) == 2 + 2 + 4  # two invariant probes, one probe called twice (fresh numbers), four setups
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b))  # reproducible
    assert torch.equal(a[2][0], a[3][0])  # the fresh-numbers probe: the same rows twice
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a[4:], c[4:]))  # the setups' drafts follow the seed
    assert [x[1:] for x in a] == [(torch.float64, torch.float64)] * 4 + [(torch.float32, torch.float32)] * 4


def test_given_uniforms_checks_the_next_token_lies_in_the_residual():
    def token_zero(draft_tokens, q, p, u_accept, u_next):
        n, _ = minibass.rejection.accept_and_resample(draft_tokens, q, p, u_accept, u_next)
        return n, torch.zeros_like(n)  # right counts; token 0, which no rejection case's residual holds

    verdict = oracle.check_given_uniforms(token_zero)
    assert not verdict.ok and "next token 0 has no mass in the residual" in verdict.checks[0].detail


# --- attention -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,offset", [(torch.float32, 1e-4), (torch.float64, 1e-9), (torch.float16, 3e-2)])
def test_an_offset_a_few_times_the_dtypes_tolerance_fails(dtype, offset):
    def off(*args, **kwargs):
        return BACKENDS["naive"](*args, **kwargs) + offset

    row = oracle.check_attention(off, dtypes=dtype, cases=1).checks[0]
    assert row.name.endswith("vs float64 spec") and not row.passed, row
    assert row.threshold == oracle.ATOL[dtype]


def test_float32_on_large_scores_is_held_to_its_own_tolerance():
    """Off by 5e-3 on the large-score cases only (scale > 1): 5 times float32's large-score tolerance, far below
    bfloat16's."""
    def off_on_large(q, k, v, q_lens, kv_lens, *, scale=None):
        out = BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale)
        return out + 5e-3 if scale is not None and scale > 1 else out

    rows = {c.name: c for c in oracle.check_attention(off_on_large, cases=1).checks}
    assert rows["float32 vs float64 spec"].passed
    assert not rows["float32 on large scores"].passed and "finite, but off by 0.005" in rows["float32 on large scores"].detail


def test_the_attention_seed_reaches_the_random_and_the_large_score_cases():
    def record(seen):
        def kernel(q, k, v, q_lens, kv_lens, *, scale=None):
            seen.append((scale is not None and scale > 1, float(q.double().sum())))
            return BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale)
        return kernel

    runs = {}
    for seed in (0, 1):
        seen = []
        oracle.check_attention(record(seen), cases=40, seed=seed)
        runs[seed] = ([s for large, s in seen if large], [s for large, s in seen if not large])
    assert runs[0][0] != runs[1][0]  # large-score cases
    assert runs[0][1] != runs[1][1]  # the grid and random cases


# --- generator -----------------------------------------------------------------------------------------------

def test_what_counts_as_a_hair_is_1e_5_not_more():
    from minibass.oracle.generator import near_a_cutoff

    greedy = minibass.SamplingParams(temperature=0)
    assert near_a_cutoff(torch.tensor([1.0, 1.0 - 1.5e-5, 0.0], dtype=torch.float64), 1, greedy)  # within 2e-5
    assert not near_a_cutoff(torch.tensor([1.0, 1.0 - 5e-5, 0.0], dtype=torch.float64), 1, greedy)


def test_the_generator_rows_are_tested_at_alpha_over_n_tokens_plus_2():
    alpha, n_tokens = 1e-3, 3
    verdict = oracle.check_generator(oracle.adapters.minibass_generator, n_tokens=n_tokens, samples=500, alpha=alpha)
    g_rows = [c for c in verdict.checks if "G over" in c.measured]
    assert len(g_rows) == n_tokens + 1
    for c in g_rows:
        assert c.threshold == pytest.approx(stats.critical_value(_cells(c) - 1, alpha / (n_tokens + 2)), rel=1e-12)


def test_the_generator_seed_reaches_the_engine_and_the_pair():
    seen = []

    def engine(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        seen.append((seed, json.loads((Path(target_dir) / "oracle.json").read_text())["seed"]))
        return None

    oracle.check_generator(engine, samples=10, seed=7)
    assert seen == [(7, 7)]


def test_the_repeat_tests_expected_count_is_the_mean_number_of_repeats():
    """For independent draws, repeats - sum of pi_t is a martingale: its mean is 0."""
    p = np.array([0.5, 0.3, 0.2])
    rng = np.random.default_rng(0)
    diffs = []
    for run in range(1_000):
        draws = rng.choice(3, 6, p=p)
        values, ids = np.unique(draws, return_inverse=True)
        test = stats.repeat_test(ids, p[values], 0.05, seed=run)
        diffs.append(test.repeats - test.expected)
    assert abs(np.mean(diffs)) < 4 * np.std(diffs) / np.sqrt(len(diffs))
