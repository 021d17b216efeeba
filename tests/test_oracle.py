"""The oracle: it passes minibass, fails every known bug, and its power claims hold.

Sizes here are smaller than the oracle's defaults, to keep the suite short; each test says what
power it has. The default-size runs of the closing numbers are in ``docs/oracle.md``.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

import minibass
from minibass import oracle, speculative
from minibass.attention import BACKENDS
from minibass.oracle import adapters, known_bugs, stats
from minibass.oracle.sampler import events, exact_events, setups

BUG_ROWS = 20_000  # per setup: the joint test catches total variation >= ~0.04 with probability 0.99


# --- samplers ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bug", sorted(known_bugs.SAMPLERS))
def test_every_known_bug_fails_and_the_statistic_itself_sees_it(bug):
    verdict = oracle.check_sampler(known_bugs.SAMPLERS[bug], rows=BUG_ROWS, name=bug)
    failed = verdict.failures()
    print(f"{bug}: " + "; ".join(f"{c.name} {c.statistic:.4g} > {c.threshold:.4g}" for c in failed[:4]))
    assert not verdict.ok
    # Not only impossible events or an invariant: a goodness-of-fit statistic over possible events rejects too.
    assert any("G-test" in c.name or "marginal" in c.name or "length" in c.name for c in failed)
    # The joint row says how far off the sampler is, and its detail names the cells furthest off.
    joint = next(c for c in verdict.checks if c.name == "[temperature] joint G-test")
    assert joint.measured.startswith("total variation ") and "accepted" in joint.detail
    for row in failed:  # an impossible event is named with why it is impossible (which why: the test below)
        if row.name.endswith("impossible events"):
            assert ": draft " in row.detail or ": the bonus token " in row.detail, row.detail
    if bug == "residual_not_normalised":
        row = next(c for c in failed if c.name == "[temperature] impossible events")
        assert "which has no mass in the residual max(p - q, 0)" in row.detail
    assert not any("returned swapped" in c.detail for c in verdict.checks)  # the hint is for swapped outputs only


def test_outputs_returned_the_other_way_round_are_named():
    """(next_tokens, num_accepted) for (num_accepted, next_tokens): with V = 4 and k = 3 both fit in 0..3, so the
    checks of form pass and the distribution tests fail; the joint rows say the outputs look swapped."""
    def swapped(draft_tokens, draft_probs, target_probs, *, generator=None):
        n, y = known_bugs.textbook(draft_tokens, draft_probs, target_probs, generator=generator)
        return y, n

    verdict = oracle.check_sampler(swapped, rows=BUG_ROWS)
    joints = [c for c in verdict.checks if c.name.endswith("joint G-test")]
    assert len(joints) == 4 and not any(c.passed for c in joints)
    assert all(c.detail.startswith("read the other way round, as (next_tokens, num_accepted), the outputs pass this "
                                   "test: are they returned swapped?") for c in joints), str(verdict)


def test_why_an_event_is_impossible():
    from minibass.oracle.sampler import K, V, why_impossible

    p = torch.full((K + 1, V + 1, V), 1 / V, dtype=torch.float64)
    q = p[:K].clone()
    start = V  # the context row of the first position: no previous token
    assert exact_events(p, q).get((2,), 0.0) == 0.0  # p == q: a first draft is never rejected
    assert why_impossible((2,), p, q) == "draft 1 was rejected, but p >= q on every token there, so every draft is accepted"
    q[0, start] = torch.tensor([0.4, 0.4, 0.2, 0.0], dtype=torch.float64)
    p[0, start] = torch.tensor([0.0, 0.3, 0.2, 0.5], dtype=torch.float64)  # residual max(p - q, 0): token 3 only
    p[K, 1, 3] = 0.0  # after drafts ending in token 1, the bonus token is never 3
    p[K, 1] /= p[K, 1].sum()
    reasons = {
        (1,): "draft 1 was rejected, and then token 1, which has no mass in the residual max(p - q, 0) "
              "(p = 0.3 <= q = 0.4)",
        (0,): "draft 1 was rejected, and then token 0, which the target gives probability 0 there",
        (0, 2): "draft 1 (token 0) was accepted, but the target gives it probability 0 there",
        (1,) * K + (3,): f"the bonus token 3 has probability 0 under p_{K + 1}, the target's distribution "
                         f"after all {K} drafts",
    }
    exact = exact_events(p, q)
    for event, reason in reasons.items():
        assert exact.get(event, 0.0) == 0.0  # impossible by the specification itself
        assert why_impossible(event, p, q) == reason
    assert exact[(3,)] > 0 and exact[(1,) * K + (2,)] > 0  # and their neighbours are possible


def test_events_in_words_name_the_bonus_token():
    from minibass.oracle.sampler import K, event_words

    assert event_words((3,)) == "0 drafts accepted, then token 3"
    assert event_words((2, 1)) == "1 draft accepted (2,), then token 1"
    assert event_words(tuple(range(K)) + (3,)) == f"{K} drafts accepted {tuple(range(K))}, then bonus token 3"
    verdict = oracle.check_sampler(known_bugs.SAMPLERS["bonus_off_by_one"], rows=BUG_ROWS)
    assert f"[temperature] position {K + 1} marginal (bonus token)" in [c.name for c in verdict.checks]
    bonus = next(c for c in verdict.failures() if c.name == f"[temperature] position {K + 1} marginal (bonus token)")
    assert bonus.detail.startswith("token ") and f"at position {K + 1}: observed" in bonus.detail  # its cells, named


def test_the_u_zero_bug_needs_the_given_uniforms_probe():
    bug = known_bugs.UNIFORM_SAMPLERS["accepts_at_u_zero"]

    def sampled(draft_tokens, draft_probs, target_probs, *, generator=None):  # the same bug, drawing its uniforms
        u = torch.rand(len(draft_tokens), draft_tokens.shape[1] + 1, generator=generator, dtype=torch.float64)
        return bug(draft_tokens, draft_probs, target_probs, u[:, :-1], u[:, -1])

    assert oracle.check_sampler(sampled, rows=BUG_ROWS).ok  # invisible to sampling: u == 0 has probability 2^-53
    probe = oracle.check_given_uniforms(bug)
    assert not probe.ok and "u = 0, p(x) = 0" in probe.checks[0].detail


def _float32_step(draft_tokens, draft_probs, target_probs, u_accept, u_next):
    """A correct rejection step computed in float32, as engines do: accept iff u < p / q, then the next token
    by inverse CDF of the residual (or of p after all k accepted)."""
    q, p, u, u_next = draft_probs.float(), target_probs.float(), u_accept.float(), u_next.float()
    rows, k = draft_tokens.shape
    x = draft_tokens[..., None]
    ok = u < p[:, :k].gather(-1, x).squeeze(-1) / q.gather(-1, x).squeeze(-1)
    n = ok.int().cumprod(-1).sum(-1)  # accepted before the first rejection
    at = torch.arange(rows)
    rest = torch.where((n < k)[:, None], (p[at, n] - torch.cat([q, q[:, :1]], 1)[at, n]).clamp_min(0), p[at, n])
    cdf = torch.cumsum(rest / rest.sum(-1, keepdim=True), -1)
    return n, torch.searchsorted(cdf, u_next[:, None], right=True).squeeze(-1).clamp(max=p.shape[-1] - 1)


def test_given_uniforms_in_float32_for_a_step_that_computes_in_float32():
    # float64 edges round in float32 (0.5 - 2^-30 to a tie, 1 - 2^-53 to 1): the float64 probe fails this
    # correct step, the float32 probe (its own edges) passes it, and still catches u <= p / q.
    wrong = oracle.check_given_uniforms(_float32_step).checks[0].detail
    assert "u just below the ratio" in wrong and "u = 1 - 2^-53" in wrong
    assert oracle.check_given_uniforms(_float32_step, dtype=torch.float32).ok
    bug = oracle.check_given_uniforms(known_bugs.UNIFORM_SAMPLERS["accepts_at_u_zero"], dtype=torch.float32)
    assert not bug.ok and "u = 0, p(x) = 0" in bug.checks[0].detail
    assert oracle.check_given_uniforms(minibass.rejection.accept_and_resample, dtype=torch.float32).ok
    with pytest.raises(ValueError, match="dtype"):
        oracle.check_given_uniforms(_float32_step, dtype=torch.float16)


def _first_residual_token(p, q, n):
    """The lowest-index token of norm(max(0, p_n - q_n)) (rows of p [B, k+1, V], q [B, k, V], n [B] < k)."""
    rows = torch.arange(len(n))
    q_n = torch.cat([q, torch.zeros_like(q[:, :1])], 1)[rows, n]
    return ((p[rows, n] - q_n) > 0).int().argmax(-1)


def _mixture(epsilon):
    """A subtly wrong sampler: after a rejection, with probability epsilon it emits the lowest-index token
    of the residual instead of a draw from it. Every event stays possible and both invariants hold, so
    only the goodness-of-fit statistic can see it."""

    def sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
        n, y = minibass.rejection_sample(draft_tokens, draft_probs, target_probs, generator=generator)
        broken = (torch.rand(len(n), generator=generator) < epsilon) & (n < draft_tokens.shape[1])
        first = _first_residual_token(target_probs.double(), draft_probs.double(), n.clamp(max=draft_tokens.shape[1] - 1))
        return n, torch.where(broken, first, y)

    return sampler


def test_a_sampler_off_by_tv_002_fails_at_the_default_rows():
    p, q = setups()["temperature"]
    exact = exact_events(p, q)
    moved: dict = {}  # the exact distribution of the wrong branch: rejection events mapped to the first residual token
    for event, pr in exact.items():
        n = len(event) - 1
        if n < p.shape[0] - 1:
            prev = torch.tensor([event[n - 1] if n else p.shape[1] - 1])
            first = int(_first_residual_token(p[:, prev].transpose(0, 1), q[:, prev].transpose(0, 1),
                                              torch.tensor([n])))
            event = event[:-1] + (first,)
        moved[event] = moved.get(event, 0.0) + pr
    tv_moved = 0.5 * sum(abs(exact.get(e, 0.0) - moved.get(e, 0.0)) for e in set(exact) | set(moved))
    epsilon = 0.02 / tv_moved  # the mixture (1 - eps) P + eps P' is at total variation eps * TV(P, P') = 0.02
    assert epsilon < 1
    verdict = oracle.check_sampler(_mixture(epsilon))
    print(f"epsilon {epsilon:.4f}\n{verdict}")
    failed = {c.name for c in verdict.failures()}
    assert "[temperature] joint G-test" in failed
    assert not any("impossible" in name or "accepts" in name for name in failed)


def test_the_power_bound_matches_a_simulation():
    """The miss probability from the noncentral chi-square equals the simulated one at the worst perturbation.

    Exact distribution: the 'temperature' setup's events, perturbed as the bound's worst case:
    |p' - p| proportional to p (cells split in two groups of mass a and 1 - a, scaled by 1 + d / a and
    1 - d / (1 - a)), so lambda = N d^2 / (a (1 - a)), equal to the bound 4 N d^2 when a = 1/2. 400 seeded
    G-tests on multinomial samples of N = 20,000 at a d where the predicted power is intermediate.
    """
    p, q = setups()["temperature"]
    exact = exact_events(p, q)
    keys = sorted(exact, key=lambda e: -exact[e])
    base = np.array([exact[e] for e in keys])
    half = np.cumsum(base) <= max(0.5, base[0]) + 1e-12  # the most likely cells, about half the mass (or more)
    half_mass = base[half].sum()
    n, alpha = 20_000, 1e-3
    dof = stats.pooled_dof(exact, n)
    d = 0.018
    shifted = np.where(half, base * (1 + d / half_mass), base * (1 - d / (1 - half_mass)))  # TV exactly d
    assert abs(0.5 * np.abs(shifted - base).sum() - d) < 1e-12
    lam = n * ((shifted - base) ** 2 / base).sum()
    predicted_power = 1 - scipy_stats.ncx2.cdf(stats.critical_value(dof, alpha), dof, lam)
    bound_power = 1 - stats.miss_probability(n, d, dof, alpha)
    rng = np.random.default_rng(0)
    caught = 0
    for _ in range(400):
        counts = rng.multinomial(n, shifted)
        caught += stats.g_test(dict(zip(keys, counts)), exact).pvalue < alpha
    simulated = caught / 400
    print(f"dof {dof}: simulated power {simulated:.3f}, noncentral chi-square {predicted_power:.3f}, "
          f"lower bound from 4 N d^2 {bound_power:.3f}")
    assert 0.1 < predicted_power < 0.95  # intermediate, so the comparison means something
    assert abs(simulated - predicted_power) < 4 * np.sqrt(predicted_power * (1 - predicted_power) / 400) + 0.03
    # and at the oracle's defaults: TV 0.02 is missed with probability < 1%
    level = 1e-6 / 24
    worst_dof = max(stats.pooled_dof(exact_events(*pq), 200_000) for pq in setups().values())
    assert stats.miss_probability(200_000, 0.02, worst_dof, level) < 0.01


def test_events_are_counted_as_the_rows_say():
    tokens = torch.tensor([[1, 2, 3], [1, 2, 3], [0, 0, 0]])
    n, y = torch.tensor([0, 3, 2]), torch.tensor([2, 1, 3])
    assert events(tokens, n, y) == {(2,): 1, (1, 2, 3, 1): 1, (0, 0, 3): 1}


def test_the_exact_event_tables_are_distributions_whose_first_token_is_p():
    for name, (p, q) in setups().items():
        exact = exact_events(p, q)
        assert abs(sum(exact.values()) - 1) < 1e-12, name
        first = np.zeros(p.shape[-1])
        for e, pr in exact.items():
            first[e[0]] += pr
        assert np.allclose(first, p[0, -1].numpy(), atol=1e-12), name  # the theorem at position 1


# --- transformers --------------------------------------------------------------------------------------------

def test_transformers_rejection_step_through_its_adapter():
    """1,000 rows per setup (detects TV >= ~0.18); the default-size run is reported in docs/oracle.md."""
    verdict = oracle.check_sampler(adapters.transformers_sampler, rows=1_000, name="transformers")
    print(verdict)
    verdict.raise_for_failure()


def _transformers_with_softmax_residual():
    """transformers' own _speculative_sampling, with the bug PR #28508 fixed planted back: the residual
    normalised with a softmax instead of dividing by its sum."""
    from transformers.generation import utils

    source = textwrap.dedent(inspect.getsource(utils._speculative_sampling))
    fixed = next(line for line in ("p_prime.div_(p_prime_sum)", "p_prime.div_(p_prime.sum())") if line in source)
    planted = source.replace(fixed, "p_prime = p_prime.softmax(dim=-1)")  # (4.46 divides by p_prime.sum() in place)
    namespace = dict(vars(utils))
    exec(compile(planted, "<planted>", "exec"), namespace)
    return namespace["_speculative_sampling"]


def test_transformers_step_with_a_planted_bug_fails(monkeypatch):
    planted = _transformers_with_softmax_residual()
    monkeypatch.setattr(adapters, "_transformers_step", lambda: planted)
    verdict = oracle.check_sampler(adapters.transformers_sampler, rows=1_000, name="transformers, planted")
    print(verdict)
    assert any("G-test" in c.name or "marginal" in c.name for c in verdict.failures())
    assert not any("runs" in c.name for c in verdict.failures())  # caught, not crashed


def test_transformers_fails_the_edge_uniforms():
    """Its acceptance test is r <= p/q: the u = 0 and tie cases are answered wrongly (see docs/oracle.md)."""
    from transformers.generation import utils

    if "<= probability_ratio" not in inspect.getsource(utils._speculative_sampling):
        pytest.skip("the installed transformers no longer tests r <= p/q")
    verdict = oracle.check_given_uniforms(adapters.transformers_given_uniforms)
    print(verdict)
    assert "u = 0, p(x) = 0" in verdict.checks[0].detail and "(tie)" in verdict.checks[0].detail


# --- generators ----------------------------------------------------------------------------------------------

def test_minibass_generator_passes():
    verdict = oracle.check_generator(adapters.minibass_generator, samples=4_000, name="minibass")
    print(verdict)
    verdict.raise_for_failure()


def test_a_generator_with_a_planted_loop_bug_fails():
    """minibass's loop with the target cache rolled back one token short (a broken phase through the seam)."""
    from minibass import speculative

    def rollback_one_short(target_cache, draft_cache, seq_lens):
        speculative.rollback_phase(target_cache, draft_cache, seq_lens)
        target_cache.truncate((target_cache.lengths - 1).clamp(min=0))

    broken = speculative.Phases(rollback=rollback_one_short)
    verdict = oracle.check_generator(lambda *a: adapters.minibass_generator(*a, phases=broken), samples=4_000)
    print(verdict)
    assert_caught_by_the_statistics(verdict)


def test_a_generator_that_ignores_warping_fails_a_warped_check_and_the_identity_says_so():
    """An engine that samples the target unwarped whatever it is asked passes at temperature 1 without filters,
    where warping is the identity, and the verdict says that this cannot see warping bugs; with warping asked
    for, it fails."""
    unwarped = lambda t, d, prompt, n, samples, sampling, seed: adapters.minibass_generator(  # noqa: E731
        t, d, prompt, n, samples, minibass.SamplingParams(), seed)
    plain = oracle.check_generator(unwarped, samples=2_000)
    assert plain.ok and any("warping is the identity" in note for note in plain.notes)
    warped = oracle.check_generator(unwarped, samples=2_000,
                                    sampling=minibass.SamplingParams(temperature=0.7, top_k=4, top_p=0.9))
    print(warped)
    assert not warped.ok and not any("warping is the identity" in note for note in warped.notes)


def test_a_token_left_out_by_a_hair_is_excused_and_one_left_out_clearly_is_not(tmp_path):
    """top_p just below a cutoff of the oracle's target (the mass of its two likeliest first tokens): an engine
    whose top_p lies 1e-6 higher, as float32 arithmetic may make it, keeps a third token, which the float64
    oracle leaves out by less than CUTOFF_BAND: excused, with a note, and the verdict passes. The same engine
    against a top_p 1e-3 below the cutoff emits a token the oracle leaves out clearly: impossible, a failure."""
    from minibass.oracle.generator import DRAFT_NOISE, next_token_probs, write_pair

    target = minibass.load_model(write_pair(tmp_path, 0, 8, DRAFT_NOISE)[0], dtype=torch.float64)
    first = next_token_probs(target, np.zeros((1, 1), dtype=np.int64), minibass.SamplingParams())[0, 0]
    cutoff = np.sort(first)[::-1][:2].sum()  # the mass of the two likeliest first tokens
    engine = lambda t, d, prompt, n, samples, sampling, seed: adapters.minibass_generator(  # noqa: E731
        t, d, prompt, n, samples, minibass.SamplingParams(top_p=float(cutoff + 5e-7)), seed)
    hair = oracle.check_generator(engine, samples=2_000, sampling=minibass.SamplingParams(top_p=float(cutoff - 5e-7)))
    print(hair)
    assert hair.ok and any("by less than 1e-05" in note for note in hair.notes)
    clear = oracle.check_generator(engine, samples=2_000, sampling=minibass.SamplingParams(top_p=float(cutoff - 1e-3)))
    assert [c.name for c in clear.failures()] == ["impossible sequences"]


def test_a_token_kept_by_a_hair_after_some_prefix_is_kept_by_the_reference_after_that_prefix(tmp_path):
    """The same at the second token, after first token 1 (top_p at the likeliest token's mass there): the samples
    holding the excused token are not dropped, which would skew the counts of the first token, but tested against
    the target keeping it after that prefix, as the engine does."""
    from minibass.oracle.generator import DRAFT_NOISE, next_token_probs, write_pair

    target = minibass.load_model(write_pair(tmp_path, 0, 8, DRAFT_NOISE)[0], dtype=torch.float64)
    cutoff = next_token_probs(target, np.array([[1, 0]]), minibass.SamplingParams())[0, 1].max()
    engine = lambda t, d, prompt, n, samples, sampling, seed: adapters.minibass_generator(  # noqa: E731
        t, d, prompt, n, samples, minibass.SamplingParams(top_p=float(cutoff + 5e-7)), seed)
    hair = oracle.check_generator(engine, samples=20_000, sampling=minibass.SamplingParams(top_p=float(cutoff - 5e-7)))
    print(hair)
    assert hair.ok and any("by less than 1e-05" in note and "[1] -> " in note for note in hair.notes)


def test_what_counts_as_a_hair():
    """Near a cutoff: within 1e-5 of greedy's maximum or top-k's k-th logit in logit units (whatever the
    temperature), or of top_p in mass; never a token top-p leaves out clearly once top-k keeps it, nor one of
    logit -inf."""
    from minibass.oracle.generator import near_a_cutoff

    def near(logits, token, **sampling):
        return near_a_cutoff(torch.tensor(logits, dtype=torch.float64), token, minibass.SamplingParams(**sampling))

    assert near([1.0, 1.0 - 1e-6, 0.0], 1, temperature=0) and not near([1.0, 0.999, 0.0], 1, temperature=0)
    assert near([0.0, -1.0, -1.0 - 1e-6], 2, top_k=2, temperature=100)
    assert not near([0.0, -1.0, -1.0 - 5e-4], 2, top_k=2, temperature=100)  # 5e-4 in logits, 5e-6 once scaled
    assert not near([5.0, 0.0, -1e-7, -3.0], 2, top_k=2, top_p=0.5)  # near top-k's cutoff, far from top-p's
    assert not near([0.0, 0.0, float("-inf")], 2, top_p=0.99999)


def assert_caught_by_the_statistics(verdict):
    """Failed through a G-test, not because the engine crashed or returned too little."""
    failed = [c.name for c in verdict.failures()]
    assert any(name == "joint G-test" or " | " in name for name in failed), failed  # " | ": a position's test
    assert not {"runs", "output", "continuations returned"} & set(failed)
    # Each failing test names the cells furthest from their expected counts.
    assert all("expected" in c.detail and " sd)" in c.detail for c in verdict.failures())


def _bonus_from_row_k(drafts, q, p, draft_lens, active, streams):
    """minibass's accept phase with the bonus token (after all k_b drafts are accepted) drawn from p_k, the
    target's distribution at the last draft's position, which has not seen that draft, instead of p_{k+1}."""
    rows = torch.arange(len(draft_lens))
    p = p.clone()
    p[rows, draft_lens] = p[rows, (draft_lens - 1).clamp(min=0)]
    return speculative.accept_phase(drafts, q, p, draft_lens, active, streams)


def _fixed_draft_length(draft_length, phases):
    """minibass's loop as an engine that drafts k tokens in every round, however few are left to emit, and
    cuts its output at n_tokens (as engines with a fixed number of speculative tokens do): asked for n
    tokens, it generates n + k and returns the first n. (minibass itself drafts fewer near the end.)"""

    def generate(target_dir, draft_dir, prompt, n_tokens, *rest):
        out = adapters.minibass_generator(target_dir, draft_dir, prompt, n_tokens + draft_length, *rest,
                                          draft_length=draft_length, phases=phases)
        return [tokens[:n_tokens] for tokens in out]

    return generate


@pytest.mark.parametrize("draft_length", [3, 7])
def test_a_bonus_token_from_the_wrong_row_fails_when_n_tokens_exceeds_the_draft_length(draft_length):
    """The first bonus token sits at position k + 1; n_tokens = 8 reaches it for k up to 7
    (vLLM's common 3, BASS's dynamic start 7). 2,000 samples: G at the bonus position is 3 (k = 7) to 10 (k = 3)
    times its threshold. The same engine without the bug passes."""
    broken = speculative.Phases(accept=_bonus_from_row_k)
    verdict = oracle.check_generator(_fixed_draft_length(draft_length, broken), n_tokens=8, samples=2_000)
    print(verdict)
    assert_caught_by_the_statistics(verdict)
    assert f"token {draft_length + 1} | token {draft_length}" in [c.name for c in verdict.failures()]
    control = oracle.check_generator(_fixed_draft_length(draft_length, speculative.Phases()), n_tokens=8, samples=2_000)
    assert control.ok, str(control)


def test_the_position_tests_are_conservative_for_a_correct_engine():
    """The claim behind each position's G-test: its counts vary less than a multinomial's, so a correct engine
    fails it less often than its level says. 30 runs of 1,000 plain samples from the target, 8 positions each:
    the fraction of p-values below 0.05 stays at or below 0.05 (plus 3 standard errors)."""
    from minibass.oracle.generator import DRAFT_NOISE, PROMPT, next_token_probs, pair_counts, write_pair

    with tempfile.TemporaryDirectory() as folder:
        target_dir, _ = write_pair(folder, draft_noise=DRAFT_NOISE)
        target, target64 = minibass.load_model(target_dir), minibass.load_model(target_dir, dtype=torch.float64)
    runs, n = 30, 1_000
    tokens = np.array(minibass.generate(target, [PROMPT] * (runs * n), 8, seed=0).tokens)  # (runs * n, 8)
    pvalues = []
    for run in np.split(tokens, runs):
        sequences, counts = np.unique(run, axis=0, return_counts=True)
        conditional = next_token_probs(target64, sequences, minibass.SamplingParams())
        for j in range(8):
            expected, seen = pair_counts(sequences, counts, conditional, j)
            pvalues.append(stats.g_test(seen, expected).pvalue)
    low = np.mean(np.array(pvalues) < 0.05)
    print(f"{len(pvalues)} p-values, {low:.3f} below 0.05")
    assert low <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(pvalues))


@pytest.mark.parametrize("name,p,power", [
    ("uniform over 50", np.full(50, 1 / 50), 0.05),
    ("Zipf over 10,000", (lambda w: w / w.sum())(1 / np.arange(1, 10_001) ** 1.1), 0.9),
    ("one token at 0.97", np.array([0.97] + [0.03 / 200] * 200), 0.05),
])
def test_the_repeat_test_holds_its_level_and_catches_samples_returned_twice(name, p, power):
    """stats.repeat_test is exact (a martingale), so independent samples fail it at most as often as its level:
    300 runs of 500 draws at level 0.05, for distributions with many repeats and with few (0 to 2 runs fail). Where
    repeats by chance are rare (Zipf), 250 draws returned twice fail it in every run; where almost every draw
    repeats anyway, in about one run in ten (0.09 and 0.11 of the 300 runs; so the generator check's note asks for
    longer continuations there)."""
    rng = np.random.default_rng(0)
    runs, level = 300, 0.05
    fails = {"independent": 0, "twice": 0}
    for run in range(runs):
        for kind, draws in (("independent", rng.choice(len(p), 500, p=p)),
                            ("twice", np.tile(rng.choice(len(p), 250, p=p), 2))):
            values, ids = np.unique(draws, return_inverse=True)
            fails[kind] += stats.repeat_test(ids, p[values], level, seed=run).log_evalue >= -np.log(level)
    print(name, {kind: count / runs for kind, count in fails.items()})
    assert fails["independent"] / runs <= level + 3 * np.sqrt(level * (1 - level) / runs)
    assert fails["twice"] / runs >= power


def _seeded_alike(batch):
    """An engine that serves its samples in batches, every batch seeded with the same seed: each batch repeats
    the first, so every continuation comes back n_samples / batch times."""

    def generate(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        out = []
        while len(out) < n_samples:
            out += adapters.minibass_generator(target_dir, draft_dir, prompt, n_tokens,
                                               min(batch, n_samples - len(out)), sampling, seed)
        return out

    return generate


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_a_generator_seeding_every_batch_alike_fails(seed):
    """Two batches of 2,000 with the same seed, 8 tokens: each sample is distributed as it should be, and the
    G-tests may pass (the joint failed at seeds 0 and 2, passed at 1 and 3); the repeats give it away. A generator
    seeding its batches seed, seed + 1 passes the same row."""
    verdict = oracle.check_generator(_seeded_alike(2_000), n_tokens=8, samples=4_000, seed=seed)
    print(verdict)
    row = {c.name: c for c in verdict.checks}["repeated continuations"]
    assert not row.passed and "is every batch or request seeded alike?" in row.detail and " sd of independent" in row.detail
    assert not {"runs", "output", "continuations returned", "impossible sequences"} & {c.name for c in verdict.failures()}

    def seeded_apart(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        return [tokens for i in range(2) for tokens in adapters.minibass_generator(
            target_dir, draft_dir, prompt, n_tokens, n_samples // 2, sampling, seed + i)]

    verdict = oracle.check_generator(seeded_apart, n_tokens=8, samples=4_000, seed=seed)
    assert {c.name: c for c in verdict.checks}["repeated continuations"].passed
    assert verdict.ok, str(verdict)  # every other row too: the control of the batch-seeded engine above
    assert not any("cannot see samples returned twice" in note for note in verdict.notes)  # it could have failed


def test_where_repeats_cannot_show_the_verdict_says_so():
    """At 3 tokens (216 continuations) almost every sample repeats an earlier one by chance (96-97 %): the same engine
    passes the row, and a note says that samples returned twice cannot be seen there. At 8 tokens no such note
    (test_a_generator_seeding_every_batch_alike_fails)."""
    verdict = oracle.check_generator(_seeded_alike(2_000), n_tokens=3, samples=4_000)
    print(verdict)
    assert {c.name: c for c in verdict.checks}["repeated continuations"].passed
    assert any(note.startswith("the repeated-continuations row cannot see samples returned twice here")
               and "each returned twice, failed it in 0 of 5 trials" in note and "At 3 tokens 9" in note
               for note in verdict.notes)


def test_greedy_samples_cannot_show_independence_and_the_verdict_says_so():
    verdict = oracle.check_generator(adapters.minibass_generator, n_tokens=4, samples=200,
                                     sampling=minibass.SamplingParams(temperature=0))
    print(verdict)
    assert verdict.ok
    assert any(note.startswith("one continuation has all the probability here") for note in verdict.notes)


def test_impossible_sequences_name_the_most_common_one_with_an_exact_count():
    """Top-k 1: only the target's argmax path is possible. 11,990 samples on it, then 3 of one impossible
    sequence and 7 of another: the row counts 10 and names the one seen 7 times."""
    sampling = minibass.SamplingParams(top_k=1)
    seen = {}

    def engine(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        path = adapters.minibass_generator(target_dir, draft_dir, prompt, n_tokens, 1, sampling, seed)[0]
        seen["a"], seen["b"] = [(t + 1) % 6 for t in path], [(t + 2) % 6 for t in path]  # off the path at token 1
        return [path] * (n_samples - 10) + [seen["a"]] * 3 + [seen["b"]] * 7

    verdict = oracle.check_generator(engine, samples=12_000, sampling=sampling)
    print(verdict)
    row = {c.name: c for c in verdict.checks}["impossible sequences"]
    assert row.statistic == 10 and not row.passed
    assert row.detail == (f"{tuple(seen['b'])} seen 7 times: token {seen['b'][0]} at position 1 has probability 0 "
                          "there; 1 other impossible sequence seen")
    assert "  12000  " in str(verdict) and "   10  " in str(verdict)  # counts printed whole, not as 1.2e+04


def test_the_joint_by_teacher_forcing_equals_the_enumeration():
    """exact_distribution (products of conditionals from batched forward passes) against minibass.exact."""
    from minibass import exact
    from minibass.oracle.generator import DRAFT_NOISE, PROMPT, exact_distribution, write_pair

    with tempfile.TemporaryDirectory() as folder:
        target = minibass.load_model(write_pair(folder, draft_noise=DRAFT_NOISE)[0], dtype=torch.float64)
    for sampling in (minibass.SamplingParams(), minibass.SamplingParams(temperature=0.7, top_k=3)):
        ours = exact_distribution(target, 2, sampling)
        theirs = stats.table_events(exact.autoregressive_distribution(target, PROMPT, 2, sampling))
        assert ours.keys() == theirs.keys()
        assert max(abs(ours[e] - theirs[e]) for e in ours) < 1e-12


@pytest.mark.parametrize("outputs,says", [
    (None, "returned NoneType"),
    ([5] * 10, "continuation 0 is 5 (int)"),
    ([[0.5, 1.7, 2.2]] * 10, "holds 0.5 (float)"),
    ([[1, 9, 2]] * 10, "token id 9, outside the vocabulary"),
])
def test_a_generator_returning_malformed_output_fails_with_a_message(outputs, says):
    verdict = oracle.check_generator(lambda *a: outputs, n_tokens=3, samples=10)
    print(verdict)
    assert [c.name for c in verdict.failures()] == ["output"] and says in verdict.failures()[0].detail


def _engine_helper():
    return torch.cat([torch.zeros(2), "not a tensor"])  # raises TypeError here


def test_an_exception_is_reported_at_the_callers_line():
    line = inspect.getsourcelines(_engine_helper)[1] + 1
    verdict = oracle.check_generator(lambda *a: _engine_helper(), samples=10)
    print(verdict)
    assert f"test_oracle.py:{line} in _engine_helper" in verdict.failures()[0].detail
    verdict = oracle.check_attention(lambda *a, **kw: _engine_helper(), cases=1)
    assert f"test_oracle.py:{line} in _engine_helper" in verdict.failures()[0].detail
    verdict = oracle.check_sampler(lambda *a, **kw: _engine_helper(), rows=100)
    assert f"test_oracle.py:{line} in _engine_helper" in verdict.failures()[0].detail


@pytest.mark.parametrize("alpha", [0, 1, 2, -1, float("nan")])
def test_alpha_must_lie_strictly_between_0_and_1(alpha):
    """alpha 0 would pass anything (every threshold infinite), alpha >= 1 fail anything."""
    with pytest.raises(ValueError, match="alpha"):
        oracle.check_sampler(known_bugs.SAMPLERS["residual_is_p"], rows=100, alpha=alpha)
    with pytest.raises(ValueError, match="alpha"):
        oracle.check_generator(lambda *a: [[0, 0, 0]] * 10, n_tokens=3, samples=10, alpha=alpha)


@pytest.mark.parametrize("weight,passes,samples", [(None, True, 120), (0.5, False, 400)])
def test_transformers_assisted_generation(weight, passes, samples):
    """120 samples (detects TV >= ~0.4) for the exact default; 400 for the lossy ensemble weight, whose bias is
    small with the oracle's close draft; the larger run is in docs/oracle.md."""
    from transformers import GenerationConfig

    if weight is not None and not hasattr(GenerationConfig(), "assistant_ensemble_weight"):
        pytest.skip("this transformers predates assistant_ensemble_weight")
    kwargs = {} if weight is None else {"assistant_ensemble_weight": weight}
    verdict = oracle.check_generator(lambda *a: adapters.transformers_generator(*a, **kwargs), samples=samples)
    print(verdict)
    if passes:
        verdict.raise_for_failure()
    else:
        assert_caught_by_the_statistics(verdict)


# --- attention -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_minibass_backends_pass(name):
    cases = {"ragged": 1, "naive": 1}.get(name, 60)  # 1: the grid alone (34 cases); the interpreted kernel is slow
    dtypes = (torch.float32, torch.bfloat16) if name in ("padded", "split") else (torch.float32,)
    verdict = oracle.check_attention(BACKENDS[name], dtypes=dtypes, cases=cases, name=name)
    print(verdict)
    verdict.raise_for_failure()


@pytest.mark.parametrize("bug", sorted(known_bugs.ATTENTION))
def test_every_known_attention_bug_fails_with_its_smallest_case(bug):
    verdict = oracle.check_attention(known_bugs.ATTENTION[bug], dtypes=(torch.float32, torch.bfloat16), cases=40,
                                     name=bug)
    print(verdict)
    failed = verdict.failures()
    spec = [c for c in failed if c.name.endswith("vs float64 spec")]
    if bug == "softmax_without_max":  # right on small scores: only the large-score rows fail, with the hint
        spec = failed
        assert all("running maximum" in c.detail for c in failed)
    else:  # the large-score cases may fail too (wrong there as well), never with the hint of an overflow
        assert all("Subtract each row's running maximum" not in c.detail for c in failed if c not in spec)
    assert len(spec) == 2  # in bf16 too, whose tolerance is 3000 times fp32's
    assert "q_lens=" in spec[0].detail and "at sequence" in spec[0].detail


def _spec_rows(verdict):
    """An attention verdict's rows against the float64 specification, one per dtype (each dtype also has a row
    'on large scores')."""
    return [c for c in verdict.checks if c.name.endswith("vs float64 spec")]


def _eager(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """Attention as transformers' eager code computes it in fp16 or bf16: scores rounded to the dtype, the
    softmax in fp32, its weights rounded to the dtype again before they multiply V."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out, start = torch.empty_like(q), 0
    for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        group = q.shape[1] // k_cache.shape[1]
        k = k_cache[b, :, :n_kv].repeat_interleave(group, 0)  # (H, n_kv, D)
        v = v_cache[b, :, :n_kv].repeat_interleave(group, 0)
        scores = (q[start:start + n_q].transpose(0, 1) @ k.transpose(1, 2)) * scale  # (H, n_q, n_kv), in q's dtype
        causal = torch.arange(n_kv)[None] <= (n_kv - n_q + torch.arange(n_q))[:, None]
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1, dtype=torch.float32).to(q.dtype)
        out[start:start + n_q] = (weights @ v).transpose(0, 1)
        start += n_q
    return out


def test_the_half_precision_tolerances_pass_rounding_on_the_way():
    """Rounding scores and weights to bf16 or fp16 is a precision choice, not a bug: eager attention passes
    with room to spare on its worst seed of 0-8 for bf16 (7: 0.030; ATOL's comment), with an error
    well above that of a kernel that accumulates in fp32 and rounds once, on the same cases (docs/oracle.md
    quotes both)."""
    half = (torch.bfloat16, torch.float16)
    eager = oracle.check_attention(_eager, dtypes=half, seed=7)
    exact = oracle.check_attention(BACKENDS["padded"], dtypes=half, seed=7)  # the same cases
    assert eager.ok and exact.ok
    for dtype, eager_row, exact_row in zip(half, _spec_rows(eager), _spec_rows(exact)):
        assert 1.5 * exact_row.statistic < eager_row.statistic < oracle.ATOL[dtype] / 1.5


def test_the_reported_case_is_the_smallest_failing_one_and_the_failures_are_counted():
    def fails_on_long_caches(q, k, v, q_lens, kv_lens, *, scale=None):
        out = BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale)
        return out + (kv_lens.max() > 100)  # wrong only when some cache is longer than 100

    verdict = oracle.check_attention(fails_on_long_caches, cases=40)
    failing = [c for c in oracle.attention.attention_cases(40) if max(c.kv_lens) > 100]
    assert len(failing) > 1
    smallest = min(failing, key=lambda c: c.size)
    assert verdict.failures()[0].detail.startswith(f"smallest: {smallest}")
    assert verdict.failures()[0].detail.endswith(f"{len(failing)} of 40 cases failed")


def test_a_failing_attention_row_names_the_worst_case_too():
    def wrong_on_long_caches(q, k, v, q_lens, kv_lens, *, scale=None):  # error grows with the longest cache
        return BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale) + kv_lens.max() / 1000

    verdict = oracle.check_attention(wrong_on_long_caches, cases=40)
    detail = verdict.failures()[0].detail
    cases = oracle.attention.attention_cases(40)
    longest = max(max(c.kv_lens) for c in cases)  # several cases share it: the smallest of them is named
    worst = min((c for c in cases if max(c.kv_lens) == longest), key=lambda c: c.size)
    assert detail.startswith("smallest: ") and f"Worst: {worst}" in detail
    assert verdict.failures()[0].statistic == pytest.approx(max(worst.kv_lens) / 1000, rel=1e-3)


def _drops_first_key_of_long_caches(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """A small logic bug, in fp32 arithmetic: key 0 is left out of caches longer than 256 keys."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out, start = torch.empty_like(q), 0
    for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        group = q.shape[1] // k_cache.shape[1]
        k = k_cache[b, :, :n_kv].float().repeat_interleave(group, 0)
        v = v_cache[b, :, :n_kv].float().repeat_interleave(group, 0)
        scores = (q[start:start + n_q].float().transpose(0, 1) @ k.transpose(1, 2)) * scale
        keep = torch.arange(n_kv)[None] <= (n_kv - n_q + torch.arange(n_q))[:, None]
        keep[:, 0] &= n_kv <= 256  # the bug
        out[start:start + n_q] = (torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ v).transpose(0, 1)
        start += n_q
    return out


def test_bf16_hides_a_small_bug_that_fp16_and_fp32_catch_and_says_so():
    verdict = oracle.check_attention(_drops_first_key_of_long_caches, dtypes=(torch.float32, torch.bfloat16,
                                                                               torch.float16), cases=40)
    rows = _spec_rows(verdict)
    assert [c.passed for c in rows] == [False, True, False]  # the limit docs/oracle.md states
    assert 0.03 < rows[1].statistic < oracle.ATOL[torch.bfloat16]
    assert all(c.passed for c in verdict.checks if c not in rows)  # on large scores
    assert any(note.startswith("bfloat16 cannot see small bugs") for note in verdict.notes)


def _only_head_dims(*dims):
    """A correct kernel that refuses other head dims, as FlashAttention-style kernels do."""
    def kernel(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
        if q.shape[-1] not in dims:
            raise NotImplementedError(f"head dim {q.shape[-1]} is not supported")
        return BACKENDS["padded"](q, k_cache, v_cache, q_lens, kv_lens, scale=scale)
    return kernel


def test_a_kernel_for_some_head_dims_passes_when_it_says_which(monkeypatch, capsys):
    from minibass.__main__ import main

    kernel = _only_head_dims(64, 128)
    refused = oracle.check_attention(kernel, cases=40)
    assert not refused.ok and refused.failures()[0].detail.endswith(
        "It raised on every case of head dims 16 and 59 and ran the others: a kernel for some head dims only can "
        "say which (head_dims=, --head-dims)")
    verdict = oracle.check_attention(kernel, cases=40, head_dims=[np.int64(128), 64, 256, 64])
    assert verdict.ok and verdict.notes[-1].startswith("head dims tested: 64, 128 (of the head_dims given; no case "
                                                       "is nearest to 256;")
    cases = oracle.attention.attention_cases(40)
    assert [c.head_dim for c in oracle.attention.attention_cases(40, head_dims=(128, 64))] == [
        64 if c.head_dim < 96 else 128 for c in cases]  # the nearest, shapes kept
    assert {c.head_dim: d.head_dim for c, d in zip(cases, oracle.attention.attention_cases(40, head_dims=(8, 24, 54)))
            } == {16: 24, 59: 54, 64: 54, 128: 54}  # 16 lies as far from 8 as from 24: the larger
    # Not a way around the check: a wrong kernel still fails at the head dims given.
    assert not oracle.check_attention(known_bugs.ATTENTION["causal_off_by_one"], cases=40, head_dims=64).ok
    # The hint is for a kernel that refuses whole head dims, not for one that raises on everything.
    assert "head_dims=" not in oracle.check_attention(_only_head_dims(), cases=40).failures()[0].detail
    for bad in ([], [0], [True], ["64"], "64", 64.0, torch.tensor(64)):
        with pytest.raises(ValueError, match="head_dims"):
            oracle.check_attention(kernel, head_dims=bad)
    monkeypatch.setattr(oracle.attention, "_only", kernel, raising=False)
    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "attention", "minibass.oracle.attention:_only", "--cases", "12", "--head-dims", "64", "128"])
    assert exit_status.value.code == 0 and "head dims tested: 64, 128" in capsys.readouterr().out


def test_attention_takes_one_dtype_or_several_and_rejects_unknown_ones_before_running():
    assert oracle.check_attention(BACKENDS["naive"], dtypes=torch.float64, cases=5).ok

    def never(*args, **kwargs):
        raise AssertionError("ran before the dtypes were checked")

    with pytest.raises(ValueError, match="dtypes must be one or more of"):
        oracle.check_attention(never, dtypes=(torch.float32, torch.int64))


def _ignores_scale(q, k, v, q_lens, kv_lens, *, scale=None):
    """Accepts scale= and drops it: always head_dim ** -0.5."""
    return BACKENDS["naive"](q, k, v, q_lens, kv_lens)


def _query_tiles_of_32(q, k, v, q_lens, kv_lens, *, scale=None):
    """Queries in tiles of 32 rows; tiles after a sequence's first forget the causal mask and see every valid key."""
    out = BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale)
    start = 0
    for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        late = range(start + 32, start + n_q)  # each such query computed as a decode step over the whole cache
        if len(late):
            ones, caches = torch.ones(len(late), dtype=torch.long), (c[b:b + 1].expand(len(late), -1, -1, -1)
                                                                    for c in (k, v))
            out[start + 32:start + n_q] = BACKENDS["naive"](q[start + 32:start + n_q], *caches, ones, ones * n_kv,
                                                           scale=scale)
        start += n_q
    return out


def _scales_q_in_place(q, k, v, q_lens, kv_lens, *, scale=None):
    """Folds the scale into q in place, then attends with scale 1: right output, the caller's q changed."""
    q.mul_(q.shape[-1] ** -0.5 if scale is None else scale)
    return BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=1.0)


def _overwrites_the_cache(q, k, v, q_lens, kv_lens, *, scale=None):
    """Right output, then reuses the caller's v_cache as scratch space (valid slots included)."""
    out = BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale)
    v.zero_()
    return out


@pytest.mark.parametrize("kernel,says", [
    (_ignores_scale, "explicit scale"),
    (_query_tiles_of_32, "long chunks"),
    (_scales_q_in_place, "modified q in place"),
    (_overwrites_the_cache, "modified v_cache (valid slots) in place"),
])
def test_a_kernel_wrong_only_in_scale_long_chunks_or_its_inputs_fails(kernel, says):
    verdict = oracle.check_attention(kernel, cases=1)  # the grid alone
    print(verdict)
    assert not verdict.ok and says in verdict.failures()[0].detail


def test_a_bad_device_is_a_usage_error():
    with pytest.raises(ValueError, match="device 'nonsense'"):
        oracle.check_attention(BACKENDS["naive"], device="nonsense")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has an MPS device")
def test_a_device_type_this_build_lacks_is_said_in_one_line(capsys):
    """PyTorch's own error for a backend it was built without lists every backend it has, 50 lines of them."""
    with pytest.raises(ValueError) as refused:
        oracle.check_attention(BACKENDS["naive"], device="mps")
    assert str(refused.value) == "device 'mps' cannot hold tensors here: this build of PyTorch has no mps backend"
    from minibass.__main__ import main

    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "attention", "minibass.attention:naive", "--device", "mps"])
    err = capsys.readouterr().err
    assert exit_status.value.code == 2 and len(err.strip().splitlines()) == 1 and "has no mps backend" in err, err



def _numpy_out(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    return BACKENDS["naive"](q, k_cache, v_cache, q_lens, kv_lens, scale=scale).numpy()


def _meta_out(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    return torch.empty_like(q, device="meta")


def _no_scale_keyword(q, k_cache, v_cache, q_lens, kv_lens):
    return BACKENDS["naive"](q, k_cache, v_cache, q_lens, kv_lens)


@pytest.mark.parametrize("kernel,says", [
    (_numpy_out, "returned a ndarray, expected a torch tensor of shape (1, 4, 16)"),
    (_meta_out, "returned a tensor on device meta, expected cpu (the inputs' device)"),
    (_no_scale_keyword, "unexpected keyword argument 'scale' (by the call itself: its signature?)"),
])
def test_a_kernel_returning_no_tensor_of_its_own_device_or_refusing_scale_gets_a_verdict_that_says_so(kernel, says):
    verdict = oracle.check_attention(kernel, cases=1)
    print(verdict)
    assert not verdict.ok and says in verdict.failures()[0].detail



def test_a_kernel_whose_exp_overflows_on_large_scores_fails_only_there():
    verdict = oracle.check_attention(known_bugs.softmax_without_max, cases=1, dtypes=(torch.float32, torch.float16))
    print(verdict)
    rows = {c.name: c for c in verdict.checks}
    assert rows["float32 vs float64 spec"].passed and rows["float16 vs float64 spec"].passed  # small scores: right
    for dtype in ("float32", "float16"):
        row = rows[f"{dtype} on large scores"]
        assert not row.passed and row.statistic == 3 and "non-finite output" in row.detail
        assert "an exp that overflowed (past 88.7 in float32, 11.09 in float16)? Subtract each row's running " \
               "maximum before exp" in row.detail


def _ignores_scale(q, k, v, q_lens, kv_lens, *, scale=None):
    """A kernel that always uses head_dim ** -0.5, whatever ``scale`` it is given."""
    return BACKENDS["padded"](q, k, v, q_lens, kv_lens)


def _nan_past_the_first_row(q, k, v, q_lens, kv_lens, *, scale=None):
    """Right but for a NaN in query row 1 of every case that has one, whatever the scores."""
    out = BACKENDS["padded"](q, k, v, q_lens, kv_lens, scale=scale)
    out[1:2] = float("nan")
    return out


@pytest.mark.parametrize("kernel,what", [(_ignores_scale, "finite, but off by"),
                                         (_nan_past_the_first_row, "non-finite output")])
def test_a_large_score_failure_that_small_scores_share_is_not_blamed_on_overflow(kernel, what):
    """The large-score cases run at a scale of 40 / sqrt(D); a kernel wrong there is run again at a scale 50 times
    smaller, not 40, which is the default a kernel ignoring ``scale`` falls back on and would be right at."""
    verdict = oracle.check_attention(kernel, cases=1)
    row = {c.name: c for c in verdict.checks}["float32 on large scores"]
    assert not row.passed and what in row.detail, str(verdict)
    assert "wrong on this case's small scores too" in row.detail and "at a scale 50 times smaller" in row.detail
    assert "Subtract each row's running maximum" not in row.detail


def test_the_large_score_row_wants_the_inputs_dtype():
    def float64_out(q, k, v, q_lens, kv_lens, *, scale=None):
        return BACKENDS["padded"](q.double(), k.double(), v.double(), q_lens, kv_lens, scale=scale)

    row = {c.name: c for c in oracle.check_attention(float64_out, cases=1).checks}["float32 on large scores"]
    assert not row.passed and "no output of q's shape, dtype and device" in row.detail


def test_an_overflow_hidden_by_nan_to_num_fails_on_large_scores_and_rounding_does_not():
    """exp without the maximum, its NaN replaced by 0: finite, right on small scores, rows off by about 3.7 on
    large ones. Transformers' eager rounding of the scores to bfloat16 (off by up to 0.38 there) passes."""
    def hidden(q, k, v, q_lens, kv_lens, *, scale=None):
        return known_bugs.softmax_without_max(q, k, v, q_lens, kv_lens, scale=scale).nan_to_num(0.0)

    verdict = oracle.check_attention(hidden, cases=1, dtypes=(torch.float32, torch.bfloat16))
    rows = {c.name: c for c in verdict.checks}
    for dtype in ("float32", "bfloat16"):
        assert rows[f"{dtype} vs float64 spec"].passed
        row = rows[f"{dtype} on large scores"]
        assert not row.passed and "finite, but off by" in row.detail and "running maximum" in row.detail
    eager = oracle.check_attention(_eager, cases=1, dtypes=(torch.float16, torch.bfloat16))
    assert eager.ok, str(eager)
    # The worst seed of 0-299 for eager bfloat16 at head dim 256: off by 1.11 on large scores, inside the tolerance.
    assert oracle.check_attention(_eager, cases=1, dtypes=torch.bfloat16, head_dims=256, seed=156).ok


def test_an_error_inside_an_adapter_names_the_adapters_line(monkeypatch):
    """Only a call that fails at once (its signature) is 'by the call itself'; an error deeper in minibass's own
    adapter code names that code's line."""
    monkeypatch.setattr(adapters, "_transformers_step", lambda: (lambda *args: (torch.zeros(1, 1),)))
    verdict = oracle.check_sampler(adapters.transformers_sampler, rows=200)
    detail = verdict.failures()[0].detail
    assert "not enough values to unpack" in detail and "adapters.py:" in detail and "by the call itself" not in detail

def test_counts_that_are_not_ints_are_usage_errors():
    with pytest.raises(ValueError, match="cases must be an int"):
        oracle.check_attention(BACKENDS["naive"], cases=40.5)
    with pytest.raises(ValueError, match="rows must be an int"):
        oracle.check_sampler(known_bugs.textbook, rows=2e4)
    with pytest.raises(ValueError, match="need ints"):  # not a failing verdict of the engine: the oracle's own argument
        oracle.check_generator(adapters.minibass_generator, samples=2e3)
    with pytest.raises(ValueError, match="holds no values"):
        oracle.check_attention(BACKENDS["naive"], device="meta")


def test_the_python_api_checks_its_arguments_as_the_cli_does():
    """Code that is not callable and seeds outside [0, 2**63) are ValueErrors, not a torch error or a verdict."""
    for call in (lambda: oracle.check_sampler(None), lambda: oracle.check_given_uniforms(None),
                 lambda: oracle.check_sampler(minibass.rejection_sample, seed=1.5),
                 lambda: oracle.check_sampler(minibass.rejection_sample, seed=-1),
                 lambda: oracle.check_attention(BACKENDS["naive"], seed=2 ** 64),
                 lambda: oracle.check_generator(adapters.minibass_generator, seed="a")):
        with pytest.raises(ValueError, match="callable|seed must be an int"):
            call()


def test_given_uniforms_refuses_float_counts_rather_than_truncating_them():
    """A step returning num_accepted 0.9 is told it returned floats, not that 0 was the wrong count."""
    def floats(draft_tokens, q, p, u_accept, u_next):
        n, y = minibass.rejection.accept_and_resample(draft_tokens, q, p, u_accept, u_next)
        return n.double() - 0.1 * (n > 0), y

    verdict = oracle.check_given_uniforms(floats)
    assert not verdict.ok and "expected integers" in verdict.failures()[0].detail


def test_an_attention_kernel_returning_a_sparse_tensor_gets_a_verdict():
    verdict = oracle.check_attention(lambda *a, **kw: BACKENDS["naive"](*a, **kw).to_sparse(), cases=1)
    assert not verdict.ok and "layout" in str(verdict)


def test_a_sampler_returning_counts_that_are_not_integers_fails():
    """num_accepted as float n + 0.7: cut to an integer it would pass every row."""
    def float_counts(draft_tokens, draft_probs, target_probs, *, generator=None):
        n, y = minibass.rejection_sample(draft_tokens, draft_probs, target_probs, generator=generator)
        return n.double() + 0.7, y

    verdict = oracle.check_sampler(float_counts, rows=2_000)
    assert not verdict.ok and "num_accepted of dtype float64" in verdict.failures()[0].detail


def test_a_generator_returning_a_flat_list_is_told_so_before_it_is_counted():
    def flat(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        return [t for row in adapters.minibass_generator(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling,
                                                         seed) for t in row]

    verdict = oracle.check_generator(flat, samples=50)
    assert not verdict.ok and "continuation 0 is" in verdict.failures()[0].detail


def test_a_generator_returning_more_continuations_than_asked_fails():
    def doubled(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        return 2 * adapters.minibass_generator(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed)

    verdict = oracle.check_generator(doubled, samples=200)
    print(verdict)
    assert not verdict.ok and "returned 400 continuations, more than the 200 asked" in verdict.failures()[0].detail

# --- verdicts and the command line ---------------------------------------------------------------------------

def test_verdict_reads_and_serialises():
    v = oracle.Verdict("thing")
    v.add("a", "count", 0, 0)
    v.add("b", "G", 12.0, 10.0, detail="cell (1, 2) high")
    assert not v.ok and [c.name for c in v.failures()] == ["b"]
    assert "FAIL" in str(v) and "cell (1, 2) high" in str(v)
    assert json.loads(json.dumps(v.to_dict()))["checks"][1]["passed"] is False
    v.add("c", "a call", float("inf"), 0, detail="raised")  # the code under test failed: JSON null, not "inf"
    assert json.loads(json.dumps(v.to_dict(), allow_nan=False))["checks"][2]["statistic"] is None
    with pytest.raises(AssertionError, match="thing: FAIL"):
        v.raise_for_failure()
    assert not oracle.Verdict("empty").ok  # no checks is not a pass


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "minibass", "oracle", *args], capture_output=True, text=True)


def test_cli_json_stays_alone_on_stdout_when_the_engine_prints(tmp_path):
    (tmp_path / "chatty.py").write_text(
        "import logging, os, sys\n"
        "from minibass.attention import naive\n"
        "print('engine v1.2 loaded')\n"  # on import
        "log = logging.getLogger('chatty'); log.addHandler(logging.StreamHandler(sys.stdout)); log.warning('warm')\n"
        "def attention(*args, **kwargs):\n"
        "    print('loading kernels... done')\n"
        "    os.write(1, b'from C\\n')\n"  # below Python's sys.stdout, as C code or a subprocess writes
        "    return naive(*args, **kwargs)\n")
    run = subprocess.run([sys.executable, "-m", "minibass", "oracle", "attention", "chatty:attention", "--cases", "1",
                          "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["ok"] is True
    assert all(said in run.stderr for said in ("engine v1.2 loaded", "warm", "loading kernels... done", "from C"))


@pytest.mark.parametrize("seed", ["-5", "100000000000000000000000", "x"])
def test_cli_seed_is_checked_before_anything_runs(seed):
    run = _cli("generator", "minibass", "--seed", seed, "--samples", "200")
    assert run.returncode == 2 and "--seed: must be an int in [0, 2**63)" in run.stderr


def test_the_oracle_leaves_the_callers_random_state_alone(tmp_path):
    from minibass.oracle.generator import write_pair

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    reseeded = []
    original, torch.cuda.manual_seed_all = torch.cuda.manual_seed_all, reseeded.append  # a GPU's state, too
    try:
        write_pair(tmp_path, seed=0)
    finally:
        torch.cuda.manual_seed_all = original
    assert torch.equal(torch.rand(3), expected) and reseeded == []


def test_the_cells_named_are_those_with_evidence_not_a_stray_count_in_a_tiny_cell():
    exact = {"a": 0.3, "b": 0.3, "c": 0.0001, "d": 0.3999}
    observed = Counter({"a": 340, "b": 300, "c": 2, "d": 358})  # c: 2 seen where 0.1 expected, +6.0 sd
    assert stats.worst_cells(exact, observed, n_cells=1) == "event a: observed 340, expected 300 (+2.3 sd)"


def test_a_non_finite_output_says_whether_a_stale_slot_caused_it():
    leak = oracle.check_attention(known_bugs.ATTENTION["stale_slot_leak"], cases=1)
    assert "with the stale slots zeroed the output is finite" in leak.failures()[0].detail

    def one_key_too_wide(q, k, v, q_lens, kv_lens, *, scale=None):
        """A causal mask off by one as a kernel over the cache has it: query i reads keys up to its position + 1,
        so a sequence's last query reads the slot at kv_lens, which is stale."""
        out = torch.empty_like(q)
        group, start = q.shape[1] // k.shape[1], 0
        for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
            keys = k[b, :, :n_kv + 1].repeat_interleave(group, 0).double()  # (H, n_kv + 1, D): one slot past
            values = v[b, :, :n_kv + 1].repeat_interleave(group, 0).double()
            scores = torch.einsum("thd,hsd->hts", q[start:start + n_q].double(), keys) * (scale or q.shape[-1] ** -0.5)
            position = torch.arange(n_kv - n_q, n_kv)[:, None]
            scores = scores.masked_fill(torch.arange(n_kv + 1) > position + 1, float("-inf"))
            out[start:start + n_q] = torch.einsum("hts,hsd->thd", torch.softmax(scores, -1), values).to(q.dtype)
            start += n_q
        return out

    wide = oracle.check_attention(one_key_too_wide, cases=1)
    assert "a causal mask one key too wide, which reads the slot at kv_lens" in wide.failures()[0].detail, str(wide)

    def nan_everywhere(q, k, v, q_lens, kv_lens, *, scale=None):
        return BACKENDS["naive"](q, k, v, q_lens, kv_lens, scale=scale) * float("nan")

    own = oracle.check_attention(nan_everywhere, cases=1)
    assert "still non-finite with the stale slots zeroed" in own.failures()[0].detail


@pytest.mark.parametrize("seeding", ["one seed for every call", "row b seeded with b"])
def test_a_sampler_that_draws_the_same_numbers_on_every_call_fails(seeding):
    """Right in distribution on every call, so every G-test passes, but a seed of its own (or one per row) makes
    each call draw the same uniforms: in a decoding loop every step would repeat the last one's luck."""
    def own_seed(draft_tokens, draft_probs, target_probs, *, generator=None):
        if seeding == "one seed for every call":
            return known_bugs.textbook(draft_tokens, draft_probs, target_probs,
                                       generator=torch.Generator().manual_seed(1234))
        rows = [known_bugs.textbook(draft_tokens[b:b + 1], draft_probs[b:b + 1], target_probs[b:b + 1],
                                    generator=torch.Generator().manual_seed(b)) for b in range(len(draft_tokens))]
        return tuple(torch.cat(parts) for parts in zip(*rows))

    verdict = oracle.check_sampler(own_seed, rows=200)
    failed = {c.name: c for c in verdict.failures()}
    assert set(failed) == {"draws fresh random numbers on every call"}, str(verdict)
    assert "does it draw the same random numbers on every call" in \
        failed["draws fresh random numbers on every call"].detail
    row = {c.name: c for c in oracle.check_sampler(known_bugs.textbook, rows=200).checks}
    assert row["draws fresh random numbers on every call"].passed


def test_a_sampler_that_changes_its_inputs_is_told_which():
    def scratch_in_place(draft_tokens, draft_probs, target_probs, *, generator=None):
        target_probs *= 2  # the caller's tensor used as scratch space; the result is still right
        return known_bugs.textbook(draft_tokens, draft_probs, target_probs / 2, generator=generator)

    verdict = oracle.check_sampler(scratch_in_place, rows=BUG_ROWS)
    assert not verdict.ok and "modified target_probs in place" in str(verdict)
    # Its outputs are still tested: the distribution and the invariants hold, only the changed inputs fail rows.
    failed = {c.name: c.detail for c in verdict.failures()}
    assert set(failed) == {"never accepts x with p(x) = 0", "p == q accepts every draft",
                           "draws fresh random numbers on every call"} | {f"[{setup}] runs" for setup in setups()}
    assert all(detail == "modified target_probs in place: inputs belong to the caller" for detail in failed.values())
    assert any(c.name == "[temperature] joint G-test" and c.passed for c in verdict.checks)

    def scratch_and_out_of_range(draft_tokens, draft_probs, target_probs, *, generator=None):
        target_probs *= 2
        n, y = known_bugs.textbook(draft_tokens, draft_probs, target_probs / 2, generator=generator)
        return n, y + draft_probs.shape[-1]  # and a token outside the vocabulary: both are told

    verdict = oracle.check_sampler(scratch_and_out_of_range, rows=200)
    assert all("in place" in c.detail and "outside the vocabulary" in c.detail for c in verdict.failures())


@pytest.mark.parametrize("n_tokens", [2, 3, 8])
def test_a_generator_that_returns_the_prompt_too_is_told_so(n_tokens):
    """Rows cut to n_tokens: with n_tokens = 2 they hold only the start of the prompt [1, 4, 2]."""
    from minibass.oracle.generator import PROMPT

    def with_prompt(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        return [list(prompt) + [0] * n_tokens for _ in range(n_samples)]

    verdict = oracle.check_generator(with_prompt, samples=50, n_tokens=n_tokens)
    print(verdict)
    says = "the prompt [1, 4, 2]" if n_tokens >= 3 else "[1, 4], the start of the prompt [1, 4, 2]"
    assert not verdict.ok and f"every continuation starts with {says}: return the new tokens only" in str(verdict)
    assert PROMPT == [1, 4, 2]


def test_rows_too_short_get_no_note_on_the_bonus_token():
    """The bonus-token note speaks of positions the rows do not reach: only the failing row is told."""
    verdict = oracle.check_generator(lambda *a: [[0, 1]] * 10, n_tokens=3, samples=10)
    print(verdict)
    assert [c.name for c in verdict.failures()] == ["continuations returned"]
    assert not any("bonus token" in note for note in verdict.notes)


def test_cli_exit_status_and_json(tmp_path):
    (tmp_path / "my_engine.py").write_text(
        "from minibass.oracle.known_bugs import residual_is_p as sampler\n"
        "from minibass.attention import split as attention\n")
    ok = subprocess.run([sys.executable, "-m", "minibass", "oracle", "attention", "my_engine:attention", "--cases", "12",
                         "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    bad = subprocess.run([sys.executable, "-m", "minibass", "oracle", "sampler", "my_engine:sampler", "--rows", "500"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 1 and "FAIL" in bad.stdout
    unknown = _cli("sampler", "no_such_module:fn")
    assert unknown.returncode == 2 and "cannot import" in unknown.stderr
    assert _cli("sampler", "vllm").returncode == 2  # not an adapter name, not module:function


@pytest.mark.parametrize("args,says", [
    (["attention", "minibass", "--device", "nonsense"], "device 'nonsense'"),
    (["sampler", "minibass", "--alpha", "0"], "alpha"),
    (["generator", "minibass", "--alpha", "nan"], "alpha"),
    (["sampler", "vllm"], "adapter name (minibass, transformers)"),
    (["sampler", "minibass", "--device", "cdua"], "--device applies to the attention check only"),
    (["generator", "minibass", "--dtypes", "float16"], "--dtypes applies to the attention check only"),
    (["attention", "minibass", "--rows", "500"], "--rows applies to the sampler check only"),
    (["attention", "minibass", "--alpha", "0.01"], "--alpha applies to the sampler and generator checks only"),
    (["generator", "minibass", "--uniforms", "minibass"], "--uniforms applies to the sampler check only"),
    (["sampler", "minibass", "--head-dims", "64"], "--head-dims applies to the attention check only"),
    (["attention", "minibass", "--uniforms-dtype", "float32"], "--uniforms-dtype applies to the sampler check only"),
    (["sampler", "minibass.rejection:rejection_sample", "--uniforms-dtype", "float32"], "needs --uniforms"),
    (["attention", "minibass", "--cases", "abc"], "argument --cases: invalid int value: 'abc'"),
    (["attention", "transformers"], "'transformers' has no attention adapter (it has one for the sampler and "
                                    "generator checks); the attention adapters: minibass"),
])
def test_cli_usage_errors_exit_2(args, says, capsys):
    from minibass.__main__ import main

    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", *args])
    err = capsys.readouterr().err
    assert exit_status.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_the_oracle_runs_as_its_own_module_too():
    """``python -m minibass.oracle`` is ``python -m minibass oracle``, as ``python -m minibass.bench`` is a module."""
    run = subprocess.run([sys.executable, "-m", "minibass.oracle", "sampler", "nosuch"], capture_output=True, text=True)
    assert run.returncode == 2 and "TARGET must be 'package.module:function'" in run.stderr, run.stderr


def test_cli_a_module_raising_on_import_is_a_usage_error_with_its_line(tmp_path, monkeypatch, capsys):
    from minibass.__main__ import main

    (tmp_path / "broken_engine.py").write_text("import math\nraise RuntimeError('needs a GPU')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "sampler", "broken_engine:rejection_sample"])
    err = capsys.readouterr().err
    assert exit_status.value.code == 2 and "RuntimeError: needs a GPU" in err and "broken_engine.py:2" in err


def test_cli_resolves_uniforms_before_running_and_names_the_option(monkeypatch, capsys):
    from minibass.__main__ import main

    def never(*args, **kwargs):
        raise AssertionError("the check ran before --uniforms was resolved")

    monkeypatch.setattr(oracle, "check_sampler", never)
    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "sampler", "minibass", "--uniforms", "minibass.rejection:nope"])
    err = capsys.readouterr().err
    assert exit_status.value.code == 2 and "--uniforms 'minibass.rejection:nope'" in err


def test_cli_uniforms_take_an_adapter_name_and_the_generator_a_head_dim(monkeypatch, capsys):
    from minibass.__main__ import main

    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "sampler", "minibass", "--uniforms", "minibass", "--rows", "500"])
    assert exit_status.value.code == 0 and "edge uniforms" in capsys.readouterr().out
    dtypes = []
    monkeypatch.setattr(oracle, "check_given_uniforms", lambda fn, name=None, dtype=None: dtypes.append(dtype)
                        or oracle.Verdict("stub", []))
    with pytest.raises(SystemExit):
        main(["oracle", "sampler", "minibass", "--rows", "500", "--uniforms-dtype", "float32"])
    assert dtypes == [torch.float32]
    seen = {}

    def check_generator(fn, **kwargs):
        seen.update(kwargs)
        return oracle.Verdict("stub", [oracle.Check("a", "b", 0.0, 0.0, True)])

    monkeypatch.setattr(oracle, "check_generator", check_generator)
    with pytest.raises(SystemExit):
        main(["oracle", "generator", "minibass", "--head-dim", "64"])
    assert seen["head_dim"] == 64 and seen["n_tokens"] == 3


def test_adapters_are_reachable_from_the_package_and_a_closed_pipe_ends_quietly():
    code = "from minibass import oracle; print(callable(oracle.adapters.transformers_sampler))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"
    # `... | head`: the reader closes the pipe before the verdict is printed; stdout buffered, as by default.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-m", "minibass", "oracle", "attention", "minibass", "--cases", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait()
    assert "Traceback" not in err and "BrokenPipe" not in err and proc.returncode == 141, err


def test_the_textbook_step_is_exact():
    oracle.check_sampler(known_bugs.textbook, rows=BUG_ROWS).raise_for_failure()


@pytest.mark.parametrize("head_dim", [0, 3, -8, True, 8.0])
def test_the_generator_pair_needs_an_even_head_dim(head_dim):
    with pytest.raises(ValueError, match="head_dim must be an even int"):
        oracle.check_generator(adapters.minibass_generator, head_dim=head_dim)


def test_dtypes_given_as_a_string_are_refused():
    with pytest.raises(ValueError, match="torch dtypes"):
        oracle.check_attention(BACKENDS["naive"], dtypes="float32")


def test_cli_uniforms_from_a_module_and_an_empty_name(tmp_path, monkeypatch, capsys):
    from minibass.__main__ import main

    (tmp_path / "edge_engine.py").write_text("from minibass.rejection import rejection_sample, accept_and_resample\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "sampler", "edge_engine:rejection_sample", "--uniforms", "edge_engine:accept_and_resample",
              "--rows", "500"])
    out = capsys.readouterr().out
    assert exit_status.value.code == 0 and "edge uniforms" in out
    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "sampler", "edge_engine:rejection_sample", "--uniforms", ""])
    assert exit_status.value.code == 2 and "--uniforms must be" in capsys.readouterr().err


def test_the_transformers_adapter_drops_only_assisted_generations_warning_against_itself():
    import logging

    from minibass.oracle.adapters import _without_transformers_own_deprecation

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("transformers.generation.utils")
    logger.addHandler(handler)
    try:
        with _without_transformers_own_deprecation():
            logger.warning("Passing `generation_config` together with generation-related arguments=({'x'}) is ...")
            logger.warning("something else")
        logger.warning("Passing `generation_config` together with generation-related arguments=({'y'}) is ...")
    finally:
        logger.removeHandler(handler)
    assert seen == ["something else", "Passing `generation_config` together with generation-related "
                                      "arguments=({'y'}) is ..."]


def test_cli_edge_uniforms_of_another_function_say_whose_they_are(capsys):
    """--uniforms names a function other than the one under test: its rows say so, so that its failure is not
    read as the sampler's."""
    from minibass.__main__ import main

    uniforms = "minibass.oracle.known_bugs:accepts_at_u_zero"  # (transformers' own step passes from 5.25 on)
    with pytest.raises(SystemExit) as exit_status:
        main(["oracle", "sampler", "minibass.rejection:rejection_sample", "--rows", "500", "--uniforms", uniforms])
    out = capsys.readouterr().out
    assert exit_status.value.code == 1 and f"failing case [edge uniforms ({uniforms})]: u = 0, p(x) = 0" in out
