"""Exact equality: the speculative algorithm's output distribution, enumerated, equals the target's.

Leviathan et al. 2023 (Appendix A.1) prove it; here it is checked in float64 for
hypothesis-generated distributions (zeros, p == q, one-hot, near-zero masses) and
context-dependent table models, for k = 1..4, with and without warping: first for the algorithm
as ``exact.speculative_distribution`` states it, then for minibass's own code of the rejection
step (``rejection.accept_and_resample``), its law read off the code by ``exact.step_law``, which
tells the known broken samplers from it.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

from minibass import SamplingParams, TableLM, exact
from minibass.oracle import known_bugs

TV_BOUND = 1e-12


@st.composite
def distributions(draw, vocab, rows):
    """[rows, V] probabilities with zeros, near-zero masses, one-hots and duplicates."""
    out = []
    for _ in range(rows):
        kind = draw(st.sampled_from(["dense", "sparse", "one-hot", "tiny"]))
        if kind == "one-hot":
            row = [0.0] * vocab
            row[draw(st.integers(0, vocab - 1))] = 1.0
        else:
            row = [draw(st.floats(0.0, 1.0)) for _ in range(vocab)]
            if kind == "sparse":
                row = [x if draw(st.booleans()) else 0.0 for x in row]
            if kind == "tiny":
                row[draw(st.integers(0, vocab - 1))] = 1e-9
            if sum(row) == 0:
                row[draw(st.integers(0, vocab - 1))] = 1.0
        out.append(row)
    p = torch.tensor(out, dtype=torch.float64)
    return p / p.sum(-1, keepdim=True)


@st.composite
def position_models(draw, max_vocab=8):
    """Target and draft whose next-token distribution depends on the position (order 0)."""
    vocab = draw(st.integers(2, max_vocab))
    period = draw(st.integers(1, 4))
    p = draw(distributions(vocab, period))
    q = p.clone() if draw(st.integers(0, 4)) == 0 else draw(distributions(vocab, period))  # sometimes p == q
    return TableLM.from_probs(p), TableLM.from_probs(q)


def test_a_table_model_refuses_tables_it_cannot_sample_from():

    for bad in (lambda: TableLM(torch.full((1, 3, 2), float("nan")), order=1),
                lambda: TableLM(torch.full((1, 3, 2), float("inf")), order=1),
                lambda: TableLM(torch.zeros(1, 3, 2), order=True), lambda: TableLM(torch.zeros(1, 3, 2), order=1.0),
                lambda: TableLM.random(3, period=0), lambda: TableLM.from_probs([0.5, 0.5]),
                lambda: TableLM.from_probs([[0.5, -0.1, 0.6]])):
        with pytest.raises(ValueError):
            bad()


@given(models=position_models(), k=st.integers(1, 4), n=st.integers(1, 3))
def test_exact_equality_for_generated_distributions(models, k, n):
    target, draft = models
    reference = exact.autoregressive_distribution(target, [0], n)
    speculative = exact.speculative_distribution(target, draft, [0], n, k)
    assert abs(float(reference.sum()) - 1) < 1e-12
    assert exact.total_variation(reference, speculative) <= TV_BOUND


@given(vocab=st.integers(2, 5), target_order=st.integers(0, 2), draft_order=st.integers(0, 2),
       seeds=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), k=st.integers(1, 4),
       params=st.sampled_from([SamplingParams(), SamplingParams(temperature=0.6), SamplingParams(temperature=0),
                               SamplingParams(top_k=2), SamplingParams(temperature=1.4, top_p=0.7)]))
def test_exact_equality_for_context_dependent_tables(vocab, target_order, draft_order, seeds, k, params):
    target = TableLM.random(vocab, order=target_order, period=2, seed=seeds[0], zero_fraction=0.2)
    draft = TableLM.random(vocab, order=draft_order, period=3, seed=seeds[1], sharpness=3.0)
    reference = exact.autoregressive_distribution(target, [1, 0], 3, params)
    speculative = exact.speculative_distribution(target, draft, [1, 0], 3, k, params)
    assert exact.total_variation(reference, speculative) <= TV_BOUND


@settings(max_examples=15)  # each example reads the step's code at up to 64 drafts, by bisection
@given(models=position_models(max_vocab=4), k=st.integers(1, 3))
def test_the_shipped_rejection_step_is_exact_for_generated_distributions(models, k):
    target, draft = models
    reference = exact.autoregressive_distribution(target, [0], k + 1)
    assert exact.total_variation(reference, exact.one_step_distribution(exact.shipped_step, target, draft, [0], k)) \
        <= TV_BOUND


@settings(max_examples=15)
@given(target_order=st.integers(0, 2), draft_order=st.integers(0, 2), seeds=st.tuples(st.integers(0, 10**6),
       st.integers(0, 10**6)), k=st.integers(1, 3),
       params=st.sampled_from([SamplingParams(), SamplingParams(temperature=0.6), SamplingParams(temperature=0),
                               SamplingParams(top_k=2), SamplingParams(temperature=1.4, top_p=0.7)]))
def test_the_shipped_rejection_step_is_exact_for_context_dependent_tables(target_order, draft_order, seeds, k, params):
    target = TableLM.random(3, order=target_order, period=2, seed=seeds[0], zero_fraction=0.2)
    draft = TableLM.random(3, order=draft_order, period=3, seed=seeds[1], sharpness=3.0)
    reference = exact.autoregressive_distribution(target, [1, 0], k + 1, params)
    shipped = exact.one_step_distribution(exact.shipped_step, target, draft, [1, 0], k, params)
    assert exact.total_variation(reference, shipped) <= TV_BOUND


def given_uniforms(sampler):
    """A known-bug sampler (``rejection_sample``'s signature, uniforms drawn inside) with its uniforms given."""
    def step(draft_tokens, draft_probs, target_probs, u):
        with mock.patch.object(known_bugs, "_inputs", lambda q, p, generator, k: (q.double(), p.double(), u)):
            return sampler(draft_tokens, draft_probs, target_probs)
    return step


# single_target_sample draws one more uniform of its own: its output is not a function of the step's k + 1.
ENUMERABLE_BUGS = sorted(set(known_bugs.SAMPLERS) - {"single_target_sample"})


@pytest.mark.parametrize("bug", ENUMERABLE_BUGS)
def test_the_step_enumeration_tells_each_known_bug_from_an_exact_step(bug):
    """The same enumeration has teeth: every broken sampler of the oracle's gallery whose output is a function
    of the step's uniforms is off by a total variation of more than 1e-3 (their text-book twin: 1e-16), on a
    target and draft where p/q matters at every position (no zeros, k = 2, V = 3)."""
    target = TableLM.random(3, order=1, period=2, seed=1)
    draft = TableLM.random(3, order=1, period=3, seed=2, sharpness=3.0)
    reference = exact.autoregressive_distribution(target, [1, 0], 3)
    textbook = exact.one_step_distribution(given_uniforms(known_bugs.textbook), target, draft, [1, 0], 2)
    assert exact.total_variation(reference, textbook) <= TV_BOUND
    broken = exact.one_step_distribution(given_uniforms(known_bugs.SAMPLERS[bug]), target, draft, [1, 0], 2)
    print(f"{bug}: total variation {exact.total_variation(reference, broken):.3g}")
    assert exact.total_variation(reference, broken) > 1e-3


def test_step_law_reads_boxes_a_few_floats_wide():
    """A token of mass 2.2e-16 between two others (and a draft that never proposes it): its box along the next
    token's uniform is about two floats wide, and its corners are read as they are, not rounded onto the next box."""
    target = TableLM.from_probs(torch.tensor([[0.5, 2.22e-16, 0.5]], dtype=torch.float64))
    draft = TableLM.from_probs(torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64))
    for k in (1, 2):
        reference = exact.autoregressive_distribution(target, [0], k + 1)
        shipped = exact.one_step_distribution(exact.shipped_step, target, draft, [0], k)
        assert exact.total_variation(reference, shipped) <= TV_BOUND


def test_step_law_refuses_a_step_whose_output_is_not_a_threshold_rule():
    """A step whose output differs between the corners of a box of the cuts it found raises instead of
    guessing. (A spot check: this one is seen at the box's last corner, u_next just below 1.)"""
    def striped(draft_tokens, draft_probs, target_probs, u):  # the next token alternates on stripes of u_next
        n = torch.zeros(len(u), dtype=torch.long)
        return n, ((u[:, 1] * 64).long() + (u[:, 0] > 0.5).long() * (u[:, 1] > 0.3).long()) % 2

    with pytest.raises(ValueError, match="not constant on the box"):
        exact.step_law(striped, torch.tensor([0]), torch.full((1, 2), 0.5, dtype=torch.float64),
                       torch.full((2, 2), 0.5, dtype=torch.float64))


def test_exact_distributions_see_a_different_target():
    """The comparison has teeth: a different target gives a clearly different distribution."""
    a, b = TableLM.random(4, order=1, seed=1), TableLM.random(4, order=1, seed=2)
    assert exact.total_variation(exact.autoregressive_distribution(a, [0], 2),
                                 exact.autoregressive_distribution(b, [0], 2)) > 0.1


def test_exact_input_errors():
    t = TableLM.random(3)
    with pytest.raises(ValueError, match="non-empty prompt"):
        exact.autoregressive_distribution(t, [], 2)
    with pytest.raises(ValueError, match="k must be >= 1"):
        exact.speculative_distribution(t, t, [0], 2, 0)
    with pytest.raises(ValueError, match="vocab sizes differ"):
        exact.speculative_distribution(t, TableLM.random(4), [0], 2, 1)


def test_total_variation_by_hand_and_on_mismatched_shapes():
    a = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 0.5], [0.5, 0.0]], dtype=torch.float64)
    assert exact.total_variation(a, b) == 1.0  # disjoint supports
    assert exact.total_variation(a, a) == 0.0
    with pytest.raises(ValueError, match="shapes differ"):  # not broadcast into a number that means nothing
        exact.total_variation(torch.tensor([0.5, 0.5]), torch.tensor([[0.25, 0.25], [0.25, 0.25]]))
