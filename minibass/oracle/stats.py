"""The statistics behind every distribution claim minibass makes, in one place.

Events are hashable outcomes (token tuples); an exact distribution is a dict event -> probability
(float64, from enumeration); observed samples are a ``collections.Counter`` of events.

* ``g_test``: the likelihood-ratio goodness-of-fit test (G = 2 sum o log(o / e)), with the cells
  whose expected count is below ``min_expected`` pooled into one, so the chi-square
  approximation holds, and G divided by Williams' factor q = 1 + (sum 1/p_i - 1) / (6 n dof)
  (Williams 1976): uncorrected, G's tail is heavier than chi-square's, and a correct sampler failed
  a test at level 1e-4 in 1.49e-4 of 4 million simulated runs, corrected in 1.12e-4
  (``scripts/g_test_false_alarms.py``; the level is approximate, from the chi-square
  approximation, not a bound). An observed event that the exact
  distribution gives probability 0 is an impossible event: the test rejects outright (p = 0).
* ``marginal_events`` / ``length_events``: coarser views of the same samples. A view has fewer
  cells, hence more power against a bug that concentrates in it: per-position marginals catch
  a bug at one position, the number of emitted tokens a sampler that accepts too often or too
  rarely, spread thinly over many joint cells.
* Power (``miss_probability``, ``detectable_tv``): for samples of size N from a distribution at
  total variation d from the exact one, the G statistic is approximately noncentral chi-square
  with noncentrality lambda = N sum (p' - p)^2 / p >= N (sum |p' - p|)^2 / sum p = 4 N d^2
  (Cauchy-Schwarz), so the chance of missing it is at most ``ncx2.cdf(critical, dof, 4 N d^2)``.
  The bound is attained by the worst perturbation (|p' - p| proportional to p, over two groups of
  cells of mass 1/2 each); ``tests/test_oracle.py`` simulates such a perturbation to show the
  calculation matches. The total variation here is measured on the pooled cells: a difference
  hidden inside the pooled cell (expected count below 5 each) is not counted.
"""

from __future__ import annotations

import numbers
from collections import Counter
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class GTest:
    """One goodness-of-fit test: G statistic, degrees of freedom, p-value, and the first impossible
    event seen (None if every observed event is possible)."""

    statistic: float
    dof: int
    pvalue: float
    impossible: object = None


def g_test(observed: Counter, exact: dict, min_expected: float = MIN_EXPECTED) -> GTest:
    """G-test of ``observed`` counts against the ``exact`` probabilities, small cells pooled."""
    n = sum(observed.values())
    for event in observed:
        if exact.get(event, 0.0) <= 0:
            return GTest(float("inf"), 0, 0.0, event)
    keys = sorted(exact, key=repr)
    expected = np.array([exact[e] for e in keys], dtype=np.float64) * n
    counts = np.array([observed.get(e, 0) for e in keys], dtype=np.float64)
    big = expected >= min_expected
    expected = np.append(expected[big], expected[~big].sum())
    counts = np.append(counts[big], counts[~big].sum())
    if 0 < expected[-1] < min_expected and big.sum() > 1:  # the pooled cell is small itself: merge it too
        smallest = int(np.argmin(expected[:-1]))
        expected[smallest] += expected[-1]
        counts[smallest] += counts[-1]
        expected, counts = expected[:-1], counts[:-1]
    keep = expected > 0
    expected, counts = expected[keep], counts[keep]
    if len(expected) < 2:
        return GTest(0.0, 0, 1.0)
    expected *= counts.sum() / expected.sum()  # rounding of the exact table: totals agree exactly
    n, dof = counts.sum(), len(expected) - 1
    g = stats.power_divergence(counts, expected, lambda_="log-likelihood").statistic
    williams = 1 + (n * np.sum(1 / expected) - 1) / (6 * n * dof)  # sum 1/p_i = n sum 1/expected_i
    g = float(g / williams)
    return GTest(g, dof, float(stats.chi2.sf(g, dof)))


def split_impossible(observed: Counter, exact: dict) -> tuple[Counter, Counter]:
    """(counts of events the exact distribution allows, counts of events it gives probability 0)."""
    possible, impossible = Counter(), Counter()
    for event, count in observed.items():
        (possible if exact.get(event, 0.0) > 0 else impossible)[event] = count
    return possible, impossible


def table_events(table) -> dict:
    """{token tuple: probability} from an exact table [V] * n (``minibass.exact``), zero cells left out."""
    import torch

    return {tuple(i.tolist()): float(table[tuple(i.tolist())]) for i in torch.nonzero(table)}


def pooled_dof(exact: dict, n: int, min_expected: float = MIN_EXPECTED) -> int:
    """Degrees of freedom ``g_test`` will have for ``n`` samples of this exact distribution."""
    expected = np.array(sorted(exact.values())) * n
    big = int((expected >= min_expected).sum())
    pooled = expected[expected < min_expected].sum()
    return big + int(pooled >= min_expected or (pooled > 0 and big <= 1)) - 1


def marginal_events(exact: dict, observed: Counter, position: int) -> tuple[dict, Counter]:
    """The view 'token at ``position`` of the emitted tuple, or -1 if fewer tokens were emitted'."""

    def view(event):
        return event[position] if len(event) > position else -1

    return _coarsen(exact, observed, view)


def length_events(exact: dict, observed: Counter) -> tuple[dict, Counter]:
    """The view 'number of tokens emitted' (= accepted drafts + 1 for a rejection step's events)."""
    return _coarsen(exact, observed, len)


def _coarsen(exact: dict, observed: Counter, view) -> tuple[dict, Counter]:
    coarse_exact: dict = {}
    for event, p in exact.items():
        coarse_exact[view(event)] = coarse_exact.get(view(event), 0.0) + p
    coarse_observed: Counter = Counter()
    for event, count in observed.items():
        coarse_observed[view(event)] += count
    return coarse_exact, coarse_observed


def check_alpha(alpha: float) -> None:
    """A false-alarm rate is a probability strictly between 0 and 1 (0 would pass anything, 1 fail anything)."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < 1:
        raise ValueError(f"alpha (the false-alarm rate) must lie strictly between 0 and 1, got {alpha!r}")


def check_call(fn, seed=0) -> None:
    """What every check asks of its arguments: code to call, and a seed in [0, 2**63) (as ``--seed``)."""
    if not callable(fn):
        raise ValueError(f"the code under test must be callable, got {type(fn).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")


def critical_value(dof: int, alpha: float) -> float:
    """The G statistic above which a test at false-alarm rate ``alpha`` rejects."""
    check_alpha(alpha)
    return float(stats.chi2.isf(alpha, max(dof, 1)))


def williams_bound(dof: int) -> float:
    """The largest Williams factor ``g_test`` can divide G by with ``dof`` + 1 cells, each expecting at least
    ``MIN_EXPECTED`` = 5: 1 + (sum 1/p - 1) / (6 n dof) < 1 + (dof + 1) / (30 dof)."""
    dof = max(dof, 1)
    return 1 + (dof + 1) / (6 * MIN_EXPECTED * dof)


def miss_probability(n: int, tv: float, dof: int, alpha: float) -> float:
    """Upper bound on the chance that a sample of size ``n`` from a distribution at total variation
    ``tv`` passes a G-test with ``dof`` degrees of freedom at level ``alpha`` (G divided by at most
    ``williams_bound(dof)``, so that G must pass that many times the critical value)."""
    return float(stats.ncx2.cdf(critical_value(dof, alpha) * williams_bound(dof), max(dof, 1), 4 * n * tv * tv))


def detectable_tv(n: int, dof: int, alpha: float, power: float = 0.99) -> float:
    """Smallest total variation caught with probability >= ``power`` (bisection on the bound)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if miss_probability(n, mid, dof, alpha) > 1 - power else (lo, mid)
    return hi


def total_variation(exact: dict, observed: Counter) -> float:
    """Total variation between the exact distribution and the empirical one."""
    n = sum(observed.values())
    keys = set(exact) | set(observed)
    return 0.5 * sum(abs(exact.get(e, 0.0) - observed.get(e, 0) / n) for e in keys)


def worst_cells(exact: dict, observed: Counter, n_cells: int = 3, words=lambda event: f"event {event}") -> str:
    """The ``n_cells`` events furthest from their expected counts, in standard deviations, in words
    (``words(event)`` names an event). Events expected less than once come last: there a single stray
    count is several standard deviations, and would crowd out the cells that carry the evidence."""
    n = sum(observed.values())
    scored = [((observed.get(e, 0) - p * n) / max(np.sqrt(p * n), 1e-12), e) for e, p in exact.items()]
    worst = sorted(scored, key=lambda t: (exact[t[1]] * n < 1, -abs(t[0])))[:n_cells]
    return "; ".join(f"{words(e)}: observed {observed.get(e, 0)}, expected {exact[e] * n:.3g} ({z:+.1f} sd)"
                     for z, e in worst)


# --- independence: repeated samples --------------------------------------------------------------------------
#
# Samples from an engine must be independent draws: an engine that seeds every batch (or every request) with
# the same seed returns the same continuations several times over, each one still distributed as it should be,
# so the goodness-of-fit tests above, which look at each sample's distribution, can miss it. What it cannot
# hide is repeats. Take the samples in a random order (a random order of independent draws is independent
# draws again) and call sample t a repeat if it equals an earlier one. Given the samples before it, sample t is
# a repeat with probability pi_t = the exact probability mass of the distinct samples seen so far, known here
# exactly since the oracle knows each sample's probability. So for every lambda,
# exp(lambda R - sum_t log(1 + pi_t (e^lambda - 1))), with R the number of repeats, is a nonnegative martingale
# starting at 1 (each step multiplies it by e^(lambda B) / E[e^(lambda B)] for a Bernoulli(pi_t) B). So is the
# mean of several of them (the e-value), and by Ville's inequality it ever exceeds 1 / alpha with probability
# at most alpha: a valid test, without asymptotics, for any number of samples and any distribution.

REPEAT_LAMBDAS = np.geomspace(1 / 64, 8, 10)  # the mixture's rates: small for many repeats, large for a few


@dataclass(frozen=True)
class RepeatTest:
    """Repeats among samples taken in a random order: ``repeats`` (samples equal to an earlier one),
    ``expected`` (the sum of their chances, what independent draws would average), ``threshold`` (the fewest
    repeats that fail at the level asked, given ``expected``), ``log_evalue`` (log of the test's e-value) and
    ``sd`` (the standard deviation of repeats - expected for independent draws, sqrt(sum_t pi_t (1 - pi_t))).
    The test is one-sided: too many repeats fail it, whether the samples depend on each other or come from a
    distribution more concentrated than the exact one (which the goodness-of-fit tests look at)."""

    repeats: int
    expected: float
    threshold: float
    log_evalue: float
    sd: float

    def passed(self, level: float) -> bool:
        return self.log_evalue < -np.log(level)


def repeat_test(ids: np.ndarray, probability: np.ndarray, level: float, seed: int = 0) -> RepeatTest:
    """Test independent sampling (see above). ``ids`` [n]: each sample's index into ``probability`` [U], the
    exact probabilities of the distinct samples (all > 0). The samples are put in a random order (``seed``)."""
    check_alpha(level)
    ids = np.asarray(ids)[np.random.default_rng(seed).permutation(len(ids))]  # (n,)
    first = np.zeros(len(ids), dtype=bool)
    first[np.unique(ids, return_index=True)[1]] = True  # each distinct sample's first appearance
    gained = np.where(first, np.asarray(probability, dtype=np.float64)[ids], 0.0)  # (n,) mass newly seen at t
    chance = np.minimum(np.cumsum(gained) - gained, 1.0)  # (n,) pi_t: the mass seen before sample t
    repeats, expected = int((~first).sum()), float(chance.sum())

    log_mgf = np.log1p(np.outer(np.expm1(REPEAT_LAMBDAS), chance)).sum(1)  # (lambdas,) sum_t log E[e^(lambda B_t)]

    def log_evalue(r: float) -> float:
        return float(np.logaddexp.reduce(REPEAT_LAMBDAS * r - log_mgf) - np.log(len(REPEAT_LAMBDAS)))

    bar = -np.log(level)
    lo, hi = 0.0, max(expected, 1.0)
    while log_evalue(hi) < bar:  # it grows with r: bracket, then bisect, the fewest repeats that fail (may exceed n)
        lo, hi = hi, 2 * hi
    for _ in range(60):
        lo, hi = (lo, (lo + hi) / 2) if log_evalue((lo + hi) / 2) >= bar else ((lo + hi) / 2, hi)
    sd = float(np.sqrt((chance * (1 - chance)).sum()))
    return RepeatTest(repeats, expected, float(np.ceil(hi)), log_evalue(repeats), sd)
