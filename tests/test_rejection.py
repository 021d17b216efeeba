"""rejection_sample follows the math: a G-test of its events against the exact event distribution,
with demonstrated power against the bugs real engines have shipped.

Setup. Position- and context-dependent distributions: at draft position i the draft's and the
target's next-token distributions depend on i and on the previous token (order-1 tables), so a
sampler that reads the wrong position's row, or ignores the context, is wrong. Each of N rows of
the batch is an independent trial (the batch dimension is the Monte Carlo dimension):

    x_1..x_k  ~ q_i(. | x_{i-1})            drafted sequentially from the warped draft
    (n, y)     = rejection_sample(x, q, p)   emitted: x_1..x_n, y

The event (x_1..x_n, y) has an exact probability (enumerated below, independently of the code
under test). A G-test (likelihood-ratio chi-square) with cells of small expectation pooled
compares the two at a false-alarm rate of ALPHA = 1e-6 per test.

Power. N = 200,000 rows. For a sampler whose event distribution is at total variation d from
the exact one, the G statistic's noncentrality is at least N * 4 d^2 (Cauchy-Schwarz:
sum (o - e)^2 / e >= (sum |o - e|)^2 / sum e), i.e. >= 320 for d = 0.02. With at most 293
degrees of freedom the chance of missing such a sampler at ALPHA = 1e-6 is below 1% by scipy's
noncentral chi-square (``test_power_against_tv_002`` computes it). Every known bug below is
much further away. Most produce events the exact algorithm can never produce (a resampled
token where p <= q, say), which the test rejects outright; the per-position marginals, whose
cells all have positive probability under temperature-only warping, catch them through the
statistic itself (``test_the_marginal_test_catches_each_known_bug``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st
from scipy import stats

from minibass import SamplingParams, rejection_sample
from minibass.rejection import accept_and_resample, check_rejection_inputs
from minibass.sampling import probs, sample_from

ALPHA = 1e-6
N_ROWS = 200_000
V, K = 4, 3
# Two warpings: temperature alone keeps every token possible, so a bug must show in the statistic
# itself; top-k also empties cells, so a bug can show as an impossible event (p = 0 at once).
SETUP_PARAMS = {"temperature": SamplingParams(temperature=0.6), "top_k": SamplingParams(temperature=0.8, top_k=3)}


def make_tables(seed=0, noise=1.0):
    """Logit tables: target [K+1, V+1, V], draft [K, V+1, V]; row V of dim 1 means 'no previous token'."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(K + 1, V + 1, V, generator=g, dtype=torch.float64) * 1.5
    draft = target[:K] + noise * torch.randn(K, V + 1, V, generator=g, dtype=torch.float64)
    return target, draft


TARGET_LOGITS, DRAFT_LOGITS = make_tables()


def run_pipeline(sampler, setup, *, n_rows=N_ROWS, seed=0, q_given=None, p_given=None):
    """Draft from the warped q, ask `sampler` to verify, return the emitted events as tuples."""
    P_TABLE, Q_TABLE = setup["p"], setup["q"]
    q_given = Q_TABLE if q_given is None else q_given
    p_given = P_TABLE if p_given is None else p_given
    g = torch.Generator().manual_seed(seed)
    prev = torch.full((n_rows,), V)
    prevs, tokens = [], []
    for i in range(K):
        prevs.append(prev)
        prev = sample_from(Q_TABLE[i, prev], torch.rand(n_rows, generator=g, dtype=torch.float64))
        tokens.append(prev)
    prevs.append(prev)
    draft_tokens = torch.stack(tokens, 1)  # (N, K)
    draft_probs = torch.stack([q_given[i, prevs[i]] for i in range(K)], 1)  # (N, K, V)
    target_probs = torch.stack([p_given[i, prevs[i]] for i in range(K + 1)], 1)  # (N, K+1, V)
    n_acc, nxt = sampler(draft_tokens, draft_probs, target_probs, generator=g)
    rows = torch.cat([draft_tokens, nxt[:, None]], 1).tolist()
    return [tuple(r[:n]) + (r[K],) for r, n in zip(rows, n_acc.tolist())]


def exact_events(P_TABLE, Q_TABLE):
    """P(emitted = x_1..x_n, y) by enumeration, straight from the definition of the algorithm."""
    out = {}

    def walk(prefix, prev, mass):
        i = len(prefix)
        p = P_TABLE[i, prev]
        if i == K:  # everything accepted: bonus token from p_{K+1}
            for y in range(V):
                out[prefix + (y,)] = out.get(prefix + (y,), 0.0) + mass * float(p[y])
            return
        q = Q_TABLE[i, prev]
        residual = (p - q).clamp_min(0)
        reject_total = sum(float(q[x]) * (1 - min(1.0, float(p[x] / q[x]))) for x in range(V) if q[x] > 0)
        for y in range(V):
            if residual[y] > 0:
                key = prefix + (y,)
                out[key] = out.get(key, 0.0) + mass * reject_total * float(residual[y] / residual.sum())
        for x in range(V):
            if q[x] > 0 and p[x] > 0:
                walk(prefix + (x,), x, mass * float(q[x]) * min(1.0, float(p[x] / q[x])))

    walk((), V, 1.0)
    return out


def make_setup(params):
    p, q = probs(TARGET_LOGITS, params), probs(DRAFT_LOGITS, params)
    return {"p": p, "q": q, "exact": exact_events(p, q)}


SETUPS = {name: make_setup(params) for name, params in SETUP_PARAMS.items()}


def g_test(observed: Counter, expected_probs: dict, min_expected=5.0):
    """(G statistic, p-value, degrees of freedom); events outside the support give p = 0."""
    n = sum(observed.values())
    if any(e not in expected_probs or expected_probs[e] == 0 for e in observed):
        return float("inf"), 0.0, 0
    keys = sorted(expected_probs)
    exp = np.array([expected_probs[e] * n for e in keys])
    obs = np.array([observed.get(e, 0) for e in keys], dtype=float)
    big = exp >= min_expected
    exp_cells = np.append(exp[big], exp[~big].sum())
    obs_cells = np.append(obs[big], obs[~big].sum())
    keep = exp_cells > 0
    exp_cells, obs_cells = exp_cells[keep], obs_cells[keep]
    result = stats.power_divergence(obs_cells, exp_cells, lambda_="log-likelihood")
    return float(result.statistic), float(result.pvalue), len(exp_cells) - 1


def marginal_tests(events, exact):
    """Per position j: P(at least j tokens emitted and token j = t), plus the 'fewer than j' cell."""
    pvalues = []
    for j in range(K + 1):
        exp = {}
        for e, pr in exact.items():
            key = e[j] if len(e) > j else -1  # -1: fewer than j + 1 tokens emitted
            exp[key] = exp.get(key, 0.0) + pr
        obs = Counter(e[j] if len(e) > j else -1 for e in events)
        pvalues.append(g_test(obs, exp)[1])
    return pvalues


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_exact_event_table_is_a_distribution(setup):
    exact = SETUPS[setup]["exact"]
    assert abs(sum(exact.values()) - 1) < 1e-12
    # The emitted first token is distributed as the target's first position (the theorem, position 1).
    first = np.zeros(V)
    for e, pr in exact.items():
        first[e[0]] += pr
    assert np.allclose(first, SETUPS[setup]["p"][0, V].numpy(), atol=1e-12)


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_rejection_sample_matches_the_exact_joint_distribution(setup):
    events = run_pipeline(rejection_sample, SETUPS[setup], seed=1)
    stat, pvalue, dof = g_test(Counter(events), SETUPS[setup]["exact"])
    print(f"[{setup}] correct sampler: G = {stat:.1f}, dof = {dof}, p = {pvalue:.3g}")
    assert pvalue > ALPHA


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_rejection_sample_matches_every_per_position_marginal(setup):
    pvalues = marginal_tests(run_pipeline(rejection_sample, SETUPS[setup], seed=2), SETUPS[setup]["exact"])
    print(f"[{setup}] per-position p-values:", [f"{p:.3g}" for p in pvalues])
    assert min(pvalues) > ALPHA / len(pvalues)  # Bonferroni over the K + 1 positions


# --- deliberately broken samplers, each a bug seen in real engines -----------------------------------

def _broken(bug):
    def sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
        batch, k = draft_tokens.shape
        p, q = target_probs.double(), draft_probs.double()
        u = torch.rand(batch, k + 1, generator=generator, dtype=torch.float64)
        if bug == "wrong_position_row":  # q read one position too late (rolled rows)
            q = torch.roll(q, 1, dims=1)
        p_x = p[:, :k].gather(-1, draft_tokens[..., None]).squeeze(-1)
        q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
        if bug == "single_target_sample":  # accept iff one sample of p equals the draft token
            target_draw = torch.stack([sample_from(p[:, i], u[:, i]) for i in range(k)], 1)
            accepted = target_draw == draft_tokens
        else:
            accepted = u[:, :k] * q_x < p_x
        if bug == "counts_after_rejection":
            n = accepted.long().sum(-1)  # counts acceptances after the first rejection too
        else:
            n = accepted.long().cumprod(-1).sum(-1)
        rows = torch.arange(batch)
        q_ext = torch.cat([q, q.new_zeros(batch, 1, q.shape[-1])], 1)
        p_n, q_n = p[rows, n], q_ext[rows, n]
        if bug == "bonus_off_by_one":  # the bonus token drawn from position k-1 instead of k
            p_n = torch.where((n == k)[:, None], p[:, k - 1], p_n)
        residual = (p_n - q_n).clamp_min(0)
        if bug in ("residual_is_p", "single_target_sample"):
            residual = p_n
        if bug == "residual_not_normalised":  # inverse CDF of an unnormalised row: u beyond its mass
            cdf = residual.cumsum(-1)
            nxt = torch.searchsorted(cdf, u[:, k:].contiguous(), right=True).squeeze(-1).clamp(max=residual.shape[-1] - 1)
            return n, nxt
        return n, sample_from(torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_n), u[:, k])

    return sampler


BROKEN = {
    "residual_not_normalised": dict(sampler=_broken("residual_not_normalised")),
    "residual_is_p": dict(sampler=_broken("residual_is_p")),
    "bonus_off_by_one": dict(sampler=_broken("bonus_off_by_one")),
    "counts_after_rejection": dict(sampler=_broken("counts_after_rejection")),
    "wrong_position_row": dict(sampler=_broken("wrong_position_row")),
    "single_target_sample": dict(sampler=_broken("single_target_sample")),
    # Pipeline bugs: the sampler is right, the distributions handed to it are not.
    "q_from_raw_logits": dict(sampler=rejection_sample, q_given=torch.softmax(DRAFT_LOGITS, -1)),
    "warping_on_draft_only": dict(sampler=rejection_sample, p_given=torch.softmax(TARGET_LOGITS, -1)),
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("bug", sorted(BROKEN))
def test_the_joint_test_catches_each_known_bug(bug, setup):
    case = dict(BROKEN[bug])
    events = run_pipeline(case.pop("sampler"), SETUPS[setup], seed=1, **case)
    stat, pvalue, dof = g_test(Counter(events), SETUPS[setup]["exact"])
    print(f"[{setup}] {bug}: G = {stat:.1f}, dof = {dof}, p = {pvalue:.3g}")
    assert pvalue < ALPHA, f"{bug} was not caught: G = {stat:.1f}, p = {pvalue:.3g}"


@pytest.mark.parametrize("bug", sorted(BROKEN))
def test_the_marginal_test_catches_each_known_bug(bug):
    """Full-support cells: the bugs must show in the G statistic, not only as impossible events."""
    setup = SETUPS["temperature"]
    case = dict(BROKEN[bug])
    events = run_pipeline(case.pop("sampler"), setup, seed=3, **case)
    pvalues = marginal_tests(events, setup["exact"])
    print(f"[temperature] {bug}: per-position marginal p-values {[f'{p:.3g}' for p in pvalues]}")
    assert min(pvalues) < ALPHA / len(pvalues)


def test_power_against_tv_002():
    """The arithmetic of the module docstring: power of the G-test against total variation 0.02."""
    dof = max(len(s["exact"]) for s in SETUPS.values())
    critical = stats.chi2.ppf(1 - ALPHA, dof)
    miss = stats.ncx2.cdf(critical, dof, N_ROWS * 4 * 0.02 ** 2)
    print(f"dof <= {dof}: critical G = {critical:.1f}, miss rate at TV 0.02 <= {miss:.3f}")
    assert miss < 0.01


# --- edge properties --------------------------------------------------------------------------------

@st.composite
def batches(draw):
    batch, k, vocab = draw(st.integers(1, 6)), draw(st.integers(1, 5)), draw(st.integers(2, 9))
    logits = torch.tensor(draw(st.lists(st.floats(-5, 5), min_size=batch * (2 * k + 1) * vocab,
                                        max_size=batch * (2 * k + 1) * vocab)), dtype=torch.float64)
    logits = logits.view(batch, 2 * k + 1, vocab)
    params = SamplingParams(temperature=draw(st.sampled_from([0.0, 0.5, 1.0])),
                            top_k=draw(st.integers(0, vocab)), top_p=draw(st.sampled_from([1.0, 0.6])))
    return logits[:, :k], logits[:, k:], params, draw(st.integers(0, 2**31))


def draft_from(q, seed):
    g = torch.Generator().manual_seed(seed)
    batch, k, _ = q.shape
    u = torch.rand(batch * k, generator=g, dtype=torch.float64)
    return sample_from(q.reshape(batch * k, -1), u).view(batch, k)


@given(batches())
def test_p_equal_q_never_rejects(case):
    draft_logits, _, params, seed = case
    q = probs(draft_logits, params)
    p = torch.cat([q, q[:, :1]], 1)  # same distributions, plus a bonus row
    n, _ = rejection_sample(draft_from(q, seed), q, p, generator=torch.Generator().manual_seed(seed))
    assert (n == q.shape[1]).all()


@given(batches())
def test_emitted_tokens_lie_in_the_targets_warped_support(case):
    draft_logits, target_logits, params, seed = case
    q, p = probs(draft_logits, params), probs(target_logits, params)
    tokens = draft_from(q, seed)
    n, nxt = rejection_sample(tokens, q, p, generator=torch.Generator().manual_seed(seed))
    rows = torch.arange(len(n))
    assert (p[rows, n, nxt] > 0).all()
    for b in range(len(n)):
        for i in range(int(n[b])):
            assert p[b, i, tokens[b, i]] > 0


@given(batches())
def test_seeded_calls_are_reproducible(case):
    draft_logits, target_logits, params, seed = case
    q, p = probs(draft_logits, params), probs(target_logits, params)
    tokens = draft_from(q, seed)
    a = rejection_sample(tokens, q, p, generator=torch.Generator().manual_seed(seed))
    b = rejection_sample(tokens, q, p, generator=torch.Generator().manual_seed(seed))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_greedy_accepts_exactly_the_matching_prefix():
    p_tokens = torch.tensor([[2, 0, 1, 3]])  # target argmax at positions 1..k+1
    d_tokens = torch.tensor([[2, 0, 3]])  # agrees on two positions, then differs
    one_hot = lambda t: torch.nn.functional.one_hot(t, 4).double()  # noqa: E731
    n, nxt = rejection_sample(d_tokens, one_hot(d_tokens), one_hot(p_tokens))
    assert n.tolist() == [2] and nxt.tolist() == [1]
    n, nxt = rejection_sample(p_tokens[:, :3], one_hot(p_tokens[:, :3]), one_hot(p_tokens))
    assert n.tolist() == [3] and nxt.tolist() == [3]  # all accepted, bonus = target's argmax at k+1


def test_draft_with_zero_mass_where_target_has_mass():
    q = torch.tensor([[[1.0, 0.0, 0.0]]], dtype=torch.float64)
    p = torch.tensor([[[0.2, 0.8, 0.0], [0, 0, 1.0]]], dtype=torch.float64)
    n, nxt = rejection_sample(torch.tensor([[0]]).repeat(2000, 1), q.repeat(2000, 1, 1), p.repeat(2000, 1, 1),
                              generator=torch.Generator().manual_seed(0))
    assert set(nxt[n == 0].tolist()) == {1}  # the residual is p minus q: all its mass on token 1
    assert abs((n == 1).double().mean().item() - 0.2) < 0.05


@pytest.mark.parametrize("mutate,message", [
    (lambda t, q, p: (t.int(), q, p), "draft_tokens must be long"),
    (lambda t, q, p: (t, q[:, :1], p), "draft_probs must be float"),
    (lambda t, q, p: (t, q, p[:, :2]), "target_probs must be float"),
    (lambda t, q, p: (t + 10, q, p), "draft_tokens must lie in"),
    (lambda t, q, p: (t, q.long(), p), "draft_probs must be float"),
    (lambda t, q, p: (t[0], q, p), "draft_tokens must be long \\[B, k\\]"),
])
def test_bad_inputs_raise_value_error(mutate, message):
    t = torch.tensor([[0, 1], [2, 1]])
    q = torch.full((2, 2, 3), 1 / 3, dtype=torch.float64)
    p = torch.full((2, 3, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=message):
        rejection_sample(*mutate(t, q, p))
    check_rejection_inputs(t, q, p)  # the unmutated inputs are fine
    accept_and_resample(t, q, p, torch.zeros(2, 2), torch.zeros(2))
