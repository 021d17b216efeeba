"""``check_sampler``: another engine's rejection step against the exact distribution of its events.

The function under test has ``rejection_sample``'s signature (``minibass.rejection``):
``fn(draft_tokens [B, k], draft_probs [B, k, V], target_probs [B, k+1, V], *, generator)
-> (num_accepted [B], next_tokens [B])``. Every input is a CPU tensor (probabilities float32 in the
setups, float64 in the invariant probes) and ``generator`` a CPU ``torch.Generator``; each setup is one
call with B = ``rows``. Each of the B rows is one independent trial:

    x_1..x_k ~ q_i(. | x_{i-1})            drafted by the oracle from order-1 tables
    (n, y)    = fn(x, q, p)                 the row emits the event (x_1..x_n, y)

The probability of every event is enumerated exactly (``exact_events``, straight from the
definition of the algorithm, never calling the code under test), per setup:

    temperature   both sides warped at T = 0.6; every token possible at every position
    top_k         T = 0.8 and top-k 3: zero-probability cells, so a bug can show as an impossible event
    one_hot       a greedy (one-hot) target checked against a sampled draft
    zero_mass_q   the draft gives zero mass to tokens the target can emit (top-k 2 draft, T = 1 target)

and the samples are tested four ways: the joint event distribution, each position's marginal
(position k + 1 is the bonus token, emitted when all k drafts are accepted), and the number of
emitted tokens (G-tests, ``stats.py``), plus impossible events. The joint row also reports the
total variation between the observed and the exact event distribution. Exact
invariants are probed separately: a draft token with p(x) = 0 is never accepted, p == q
accepts everything, two calls on the same rows do not emit the same event in every row (a sampler
must draw fresh random numbers from the generator it is given), and the inputs are left unchanged.

False alarms: each of the m tests runs at alpha / m (Bonferroni), so a correct sampler fails
with probability <= alpha, up to the chi-square approximation of each G-test (``stats.g_test``).
Power: the report states, per setup, the smallest total variation the joint test catches with
probability 0.99 at this many rows (``stats.detectable_tv``).
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import torch

from ..sampling import SamplingParams, is_int, probs, sample_from
from . import stats
from .verdict import Verdict, raised

V, K = 4, 3  # vocabulary and draft length of the probe tables


def _tables(seed: int = 0):
    """Logit tables: target [K+1, V+1, V], draft [K, V+1, V]; row V of dim 1 means 'no previous token'."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(K + 1, V + 1, V, generator=g, dtype=torch.float64) * 1.5
    draft = target[:K] + torch.randn(K, V + 1, V, generator=g, dtype=torch.float64)
    return target, draft


def setups() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (p [K+1, V+1, V], q [K, V+1, V]): warped distributions, context-dependent (order 1)."""
    target, draft = _tables()
    warped = lambda logits, **kw: probs(logits, SamplingParams(**kw))  # noqa: E731
    return {
        "temperature": (warped(target, temperature=0.6), warped(draft, temperature=0.6)),
        "top_k": (warped(target, temperature=0.8, top_k=3), warped(draft, temperature=0.8, top_k=3)),
        "one_hot": (warped(target, temperature=0.0), warped(draft, temperature=1.0)),
        "zero_mass_q": (warped(target, temperature=1.0), warped(draft, temperature=1.0, top_k=2)),
    }


def exact_events(p: torch.Tensor, q: torch.Tensor) -> dict:
    """P(emitted = x_1..x_n, y) by enumeration, from the definition of the algorithm."""
    out: dict = {}

    def walk(prefix, prev, mass):
        i = len(prefix)
        p_i = p[i, prev]
        if i == K:  # everything accepted: bonus token from p_{K+1}
            for y in range(V):
                if p_i[y] > 0:
                    out[prefix + (y,)] = out.get(prefix + (y,), 0.0) + mass * float(p_i[y])
            return
        q_i = q[i, prev]
        residual = (p_i - q_i).clamp_min(0)
        reject = sum(float(q_i[x]) * (1 - min(1.0, float(p_i[x] / q_i[x]))) for x in range(V) if q_i[x] > 0)
        for y in range(V):
            if residual[y] > 0 and reject > 0:
                out[prefix + (y,)] = out.get(prefix + (y,), 0.0) + mass * reject * float(residual[y] / residual.sum())
        for x in range(V):
            if q_i[x] > 0 and p_i[x] > 0:
                walk(prefix + (x,), x, mass * float(q_i[x]) * min(1.0, float(p_i[x] / q_i[x])))

    walk((), V, 1.0)
    return out


def draft_rows(p: torch.Tensor, q: torch.Tensor, rows: int, generator: torch.Generator):
    """What the oracle hands the sampler: drafts x [rows, K] sampled from q, q rows [rows, K, V], p rows [rows, K+1, V]."""
    prev = torch.full((rows,), V)
    prevs, tokens = [], []
    for i in range(K):
        prevs.append(prev)
        prev = sample_from(q[i, prev], torch.rand(rows, generator=generator, dtype=torch.float64))
        tokens.append(prev)
    prevs.append(prev)
    draft_probs = torch.stack([q[i, prevs[i]] for i in range(K)], 1)  # (rows, K, V)
    target_probs = torch.stack([p[i, prevs[i]] for i in range(K + 1)], 1)  # (rows, K+1, V)
    return torch.stack(tokens, 1), draft_probs, target_probs


def events(draft_tokens: torch.Tensor, num_accepted: torch.Tensor, next_tokens: torch.Tensor) -> Counter:
    """Counter of emitted events (x_1..x_n, y), counted in numpy (one integer code per row)."""
    x, n, y = (t.detach().cpu().numpy().astype(np.int64) for t in (draft_tokens, num_accepted, next_tokens))
    base = max(V, int(y.max()) + 1 if len(y) else V, int(x.max()) + 1 if x.size else V)
    digits = np.concatenate([x, np.zeros_like(x[:, :1])], 1)
    digits[np.arange(len(n)), np.clip(n, 0, K)] = y
    digits = digits * (np.arange(K + 1)[None, :] <= n[:, None])
    codes = n * base ** (K + 1) + (digits * base ** np.arange(K + 1)).sum(1)
    out = Counter()
    for code, count in zip(*np.unique(codes, return_counts=True)):
        length, rest = divmod(int(code), base ** (K + 1))
        out[tuple((rest // base ** j) % base for j in range(length + 1))] = int(count)
    return out


def _fits_swapped(tokens, n, y, exact: dict, level: float) -> bool:
    """Whether the events pass the joint test with the two outputs read the other way round: with V = 4 and
    k = 3 a count and a token both lie in 0..3, so a sampler that returns (next_tokens, num_accepted) gets
    past the checks of form and fails the distribution tests without a word about why."""
    if len(y) == 0 or int(y.min()) < 0 or int(y.max()) > K or int(n.min()) < 0 or int(n.max()) >= V:
        return False
    possible, impossible = stats.split_impossible(events(tokens, y, n), exact)
    return not impossible and stats.g_test(possible, exact).pvalue >= level


def _call(fn, tokens, draft_probs, target_probs, generator):
    """Call the sampler on copies and check its outputs' form; returns (n, y, problem or ''): n and y are None
    where it raised or returned something malformed. A sampler that changed an input in place has that as
    its problem, and its outputs, when well formed, come back too, so that they can still be tested."""
    inputs = (tokens.clone(), draft_probs.clone(), target_probs.clone())
    try:
        result = fn(*inputs, generator=generator)
    except Exception as e:
        result, error = None, raised(e)
    else:
        error = ""
    changed = [name for name, a, b in zip(("draft_tokens", "draft_probs", "target_probs"), inputs,
                                          (tokens, draft_probs, target_probs)) if not torch.equal(a, b)]
    changed = f"modified {', '.join(changed)} in place: inputs belong to the caller" if changed else ""

    def problem(text: str) -> str:
        return "; ".join(filter(None, (changed, text)))

    if error:
        return None, None, problem(error)
    try:
        n, y = result
        n, y = torch.as_tensor(n).reshape(-1).cpu(), torch.as_tensor(y).reshape(-1).cpu()
    except (TypeError, RuntimeError, ValueError):
        return None, None, problem(f"returned {type(result).__name__}; expected (num_accepted [B], next_tokens [B])")
    if n.dtype == torch.bool or y.dtype == torch.bool or n.is_floating_point() or y.is_floating_point() \
            or n.is_complex() or y.is_complex():  # a count or a token id cut to an integer would hide what was returned
        return None, None, problem(f"returned num_accepted of dtype {str(n.dtype)[6:]} and next_tokens of dtype "
                                   f"{str(y.dtype)[6:]}; expected integer tensors (torch.long)")
    n, y = n.long(), y.long()
    if n.shape != (len(tokens),) or y.shape != (len(tokens),):
        return None, None, problem(f"returned shapes {tuple(n.shape)}, {tuple(y.shape)}, expected ({len(tokens)},) each")
    if ((n < 0) | (n > tokens.shape[1])).any() or ((y < 0) | (y >= draft_probs.shape[-1])).any():
        return None, None, problem("returned num_accepted outside 0..k or next_tokens outside the vocabulary")
    return n, y, changed


def _invariant(verdict: Verdict, name: str, measured: str, bad: int | None, problem: str) -> None:
    """One invariant's row: the rows breaking it (where the call's outputs could be read), failing also on a
    problem of the call (a changed input, an exception, malformed outputs)."""
    detail = "; ".join(filter(None, (problem, f"{bad} rows" if bad else "")))
    verdict.add(name, measured, float("inf") if problem else bad, 0, detail=detail)


def _drafted(q: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Draft tokens [B, K], each position drawn from its own row of q [B, K, V] (no context between them)."""
    return torch.stack([sample_from(q[:, i], torch.rand(len(q), generator=generator, dtype=torch.float64))
                        for i in range(K)], 1)


def _invariants(fn, verdict: Verdict, generator: torch.Generator, rows: int) -> None:
    """The exact invariants, each on its own probe batch."""
    # p(x) = 0: q uniform, p zero on tokens 1 and 3 at every position.
    q = torch.full((rows, K, V), 1 / V, dtype=torch.float64)
    p = torch.tensor([0.5, 0.0, 0.5, 0.0], dtype=torch.float64).expand(rows, K + 1, V).clone()
    tokens = torch.randint(0, V, (rows, K), generator=generator)
    n, y, problem = _call(fn, tokens, q, p, generator)
    bad = None if n is None else int(sum(((p[:, :K].gather(-1, tokens[..., None]).squeeze(-1) == 0)
                                          & (torch.arange(K)[None] < n[:, None])).any(-1)))
    _invariant(verdict, "never accepts x with p(x) = 0", f"rows accepting a zero-probability draft, of {rows}",
               bad, problem)
    # p == q: every draft accepted.
    q = torch.softmax(torch.randn(rows, K, V, generator=generator, dtype=torch.float64), -1)
    p = torch.cat([q, q[:, :1]], 1)
    tokens = _drafted(q, generator)
    n, y, problem = _call(fn, tokens, q, p, generator)
    _invariant(verdict, "p == q accepts every draft", f"rows rejecting a draft, of {rows}",
               None if n is None else int((n != K).sum()), problem)
    # Fresh random numbers on every call: two calls on the same rows, the generator moved on between them,
    # emit the same events in every row only if the sampler draws the same numbers again (a seed of its own,
    # say), which would tie every step of a decoding loop to the one before. For a correct sampler the chance
    # is vanishing: p and q differ in every row, so each row's event is random.
    q = torch.softmax(torch.randn(rows, K, V, generator=generator, dtype=torch.float64), -1)
    p = torch.softmax(torch.randn(rows, K + 1, V, generator=generator, dtype=torch.float64), -1)
    tokens = _drafted(q, generator)
    (n1, y1, problem1), (n2, y2, problem2) = _call(fn, tokens, q, p, generator), _call(fn, tokens, q, p, generator)
    problem = problem1 or problem2
    repeated = not problem and n1 is not None and n2 is not None and bool(((n1 == n2) & (y1 == y2)).all())
    verdict.add("draws fresh random numbers on every call",
                f"two calls on the same {rows} rows that emitted the same event in every row", 1 if repeated else
                float("inf") if problem else 0, 0,
                detail=problem or ("every row emitted the same event in both calls: does it draw the same random "
                                   "numbers on every call (a seed of its own)? It must draw from the generator it is "
                                   "given" if repeated else ""))


def check_sampler(fn, *, rows: int = 200_000, alpha: float = 1e-6, seed: int = 0, name: str | None = None) -> Verdict:
    """Run ``fn`` on ``rows`` rows per setup and test its events against the exact distribution.

    ``fn``: a rejection sampler of ``rejection_sample``'s signature, ``fn(draft_tokens, draft_probs,
    target_probs, *, generator)`` -> ``(num_accepted long [B], next_tokens long [B])``. The setups
    (``setups()``): context-dependent p and q warped at temperature 0.6, top-k 3, one-hot target rows, and
    a draft with zero mass where the target has some. Returns a ``Verdict``; ``ok`` only if every
    invariant holds and no test rejects at alpha / m.
    """
    if not is_int(rows) or rows < 100:
        raise ValueError(f"rows must be an int >= 100, got {rows!r}")
    stats.check_alpha(alpha)
    stats.check_call(fn, seed)
    started = time.perf_counter()
    verdict = Verdict(f"sampler {name or getattr(fn, '__qualname__', repr(fn))}")
    generator = torch.Generator().manual_seed(seed)
    all_setups = setups()
    n_tests = len(all_setups) * (K + 3)  # per setup: joint, K + 1 marginals, emitted length
    level = alpha / n_tests
    _invariants(fn, verdict, generator, min(rows, 20_000))
    powers = []
    for setup, (p, q) in all_setups.items():
        exact = exact_events(p, q)
        tokens, draft_probs, target_probs = draft_rows(p, q, rows, generator)
        n, y, problem = _call(fn, tokens, draft_probs.float(), target_probs.float(), generator)
        if problem:
            verdict.add(f"[{setup}] runs", "a call on valid input, inputs left as given", float("inf"), 0,
                        detail=problem)
        if n is None:
            continue  # nothing to test: it raised or returned something malformed
        observed = events(tokens, n, y)
        possible, impossible = stats.split_impossible(observed, exact)
        verdict.add(f"[{setup}] impossible events", "rows emitting an event of probability 0", sum(impossible.values()),
                    0, detail=_impossible_words(impossible, p, q))
        joint = stats.g_test(possible, exact)
        tv = f"total variation {stats.total_variation(exact, observed):.4f}"
        if impossible and possible:  # the G-test sees only the possible events: say what is left among them
            tv += f", {stats.total_variation(exact, possible):.4f} among the possible events"
        detail = stats.worst_cells(exact, possible, words=event_words)
        if (impossible or joint.pvalue < level) and _fits_swapped(tokens, n, y, exact, level):
            detail = ("read the other way round, as (next_tokens, num_accepted), the outputs pass this test: are they "
                      "returned swapped? The order is (num_accepted, next_tokens). " + detail)
        verdict.add_g_test(f"[{setup}] joint G-test", joint, level, what=f"{tv}; ", detail=detail)
        powers.append(f"{setup} {stats.detectable_tv(rows, joint.dof, level):.4f}")
        views = [(f"position {j + 1} marginal" + (" (bonus token)" if j == K else ""),
                  stats.marginal_events(exact, observed, j),
                  lambda e, j=j: f"token {e} at position {j + 1}" if e >= 0 else f"fewer than {j + 1} tokens emitted")
                 for j in range(K + 1)]
        views.append(("emitted length", stats.length_events(exact, observed), lambda e: f"{e} tokens emitted"))
        for label, (coarse_exact, coarse_observed), words in views:
            coarse_possible = stats.split_impossible(coarse_observed, coarse_exact)[0]
            test = stats.g_test(coarse_possible, coarse_exact)
            verdict.add_g_test(f"[{setup}] {label}", test, level,
                               detail=stats.worst_cells(coarse_exact, coarse_possible, words=words))
    verdict.notes.append(f"{rows:,} rows per setup, V = {V}, k = {K}; each of {n_tests} tests at alpha / {n_tests} = "
                         f"{level:.2g}. Smallest total variation of the joint caught with probability 0.99: "
                         + (", ".join(powers) or "none: no setup's call returned events"))
    verdict.seconds = time.perf_counter() - started
    return verdict


def event_words(event: tuple) -> str:
    """An emitted event (x_1..x_n, y) in words: '2 drafts accepted (3, 1), then token 0'; after all K
    drafts, the next token is the bonus token."""
    n, y = len(event) - 1, event[-1]
    accepted = f" {tuple(event[:-1])}" if n else ""
    return f"{n} draft{'s' if n != 1 else ''} accepted{accepted}, then {'bonus ' if n == K else ''}token {y}"


def why_impossible(event: tuple, p: torch.Tensor, q: torch.Tensor) -> str:
    """Why the exact distribution gives the event (x_1..x_n, y) probability 0, in words; p [K+1, V+1, V] and
    q [K, V+1, V] are a setup's tables (``setups``). The oracle drafts every x_i from q, so q(x_i) > 0."""
    prev = V
    for i, x in enumerate(event[:-1]):
        if p[i, prev, x] == 0:
            return f"draft {i + 1} (token {x}) was accepted, but the target gives it probability 0 there"
        prev = x
    n, y = len(event) - 1, event[-1]
    if n == K:
        return f"the bonus token {y} has probability 0 under p_{K + 1}, the target's distribution after all {K} drafts"
    p_i, q_i = p[n, prev], q[n, prev]
    if not ((q_i > 0) & (p_i < q_i)).any():
        return f"draft {n + 1} was rejected, but p >= q on every token there, so every draft is accepted"
    if p_i[y] == 0:
        return f"draft {n + 1} was rejected, and then token {y}, which the target gives probability 0 there"
    return (f"draft {n + 1} was rejected, and then token {y}, which has no mass in the residual max(p - q, 0) "
            f"(p = {float(p_i[y]):.3g} <= q = {float(q_i[y]):.3g})")


def _impossible_words(impossible: Counter, p: torch.Tensor, q: torch.Tensor) -> str:
    """The impossible event seen most often, why it is impossible, and how many others were seen."""
    if not impossible:
        return ""
    event, count = impossible.most_common(1)[0]
    others = len(impossible) - 1
    return (f"{event_words(event)}, seen {count} time{'s' if count != 1 else ''}: {why_impossible(event, p, q)}"
            + (f"; {others} other impossible event{'s' if others != 1 else ''} seen" if others else ""))


# --- the given-uniforms probe --------------------------------------------------------------------------------

def check_given_uniforms(fn, *, name: str | None = None, dtype=torch.float64) -> Verdict:
    """Edge uniforms for a rejection step that takes its uniforms, with ``accept_and_resample``'s signature
    ``fn(draft_tokens, draft_probs, target_probs, u_accept [B, k], u_next [B])``.

    The rule for u in [0, 1) is: accept iff u < p(x) / q(x). Then u = 0 rejects a token with p(x) = 0,
    a tie u * q(x) = p(x) rejects, and u just below 1 accepts whenever p(x) >= q(x). Testing
    ``u <= p / q`` instead accepts p(x) = 0 tokens at u = 0, about once in 2^24 float32 draws,
    which no sampling test can see. For the next token only the support is checked (engines
    draw it in different ways): it must have positive residual mass after a rejection.

    ``dtype``: of the uniforms and probabilities passed, float64 (the default; the edges include
    1 - 2^-53) or float32 for a step that computes in float32 (the edges are float32's own: a
    float64 edge rounds to a tie or to 1 in float32, which a step drawing float32 uniforms never sees).
    """
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    stats.check_call(fn)
    started = time.perf_counter()
    verdict = Verdict(f"given uniforms {name or getattr(fn, '__qualname__', repr(fn))}")
    q = torch.tensor([[[0.5, 0.25, 0.25, 0.0]]], dtype=dtype)
    bits = 53 if dtype == torch.float64 else 24  # 1 - 2^-bits: the largest uniform below 1 in dtype
    below_one, below_half = 1 - 2.0 ** -bits, 0.5 - max(2.0 ** -30, 2.0 ** -(bits + 1))
    cases = [  # (label, draft token, p row, u_accept, u_next, expected num_accepted)
        ("u = 0, p(x) = 0", 0, [0.0, 0.5, 0.5, 0.0], 0.0, 0.0, 0),
        ("u * q = p exactly (tie)", 0, [0.25, 0.25, 0.5, 0.0], 0.5, 0.0, 0),
        ("u just below the ratio", 0, [0.25, 0.25, 0.5, 0.0], below_half, 0.0, 1),
        (f"u = 1 - 2^-{bits} ({str(dtype)[6:]} uniforms), p(x) = q(x)", 0, [0.5, 0.0, 0.5, 0.0], below_one, 0.5, 1),
        ("u = 1 - 2^-24, p(x) > q(x)", 1, [0.1, 0.6, 0.3, 0.0], 1 - 2.0 ** -24, 0.5, 1),
        ("u = 1 - 2^-24, p(x) < q(x)", 0, [0.4, 0.1, 0.1, 0.4], 1 - 2.0 ** -24, 1 - 2.0 ** -24, 0),
        ("u_next = 0 after a rejection", 0, [0.0, 0.0, 0.5, 0.5], 0.5, 0.0, 0),
        ("u_next just below 1 after a rejection", 0, [0.2, 0.0, 0.8, 0.0], 0.9, below_one, 0),
    ]
    wrong = []
    for label, token, p_row, u_acc, u_next, expect in cases:
        p = torch.tensor([[p_row, [0.25, 0.25, 0.25, 0.25]]], dtype=dtype)
        try:
            result = fn(torch.tensor([[token]]), q, p, torch.tensor([[u_acc]], dtype=dtype),
                        torch.tensor([u_next], dtype=dtype))
        except Exception as e:
            wrong.append(f"{label}: {raised(e)}")
            continue
        try:
            n, y = (torch.as_tensor(t).reshape(-1)[0] for t in result)
        except (TypeError, RuntimeError, ValueError, IndexError):
            wrong.append(f"{label}: returned {type(result).__name__}; expected (num_accepted [1], next_tokens [1])")
            continue
        if n.is_floating_point() or y.is_floating_point() or n.dtype == torch.bool or y.dtype == torch.bool:
            wrong.append(f"{label}: returned num_accepted {n.dtype} and next_tokens {y.dtype}; expected integers")
            continue
        n, y = int(n), int(y)
        residual = (p[0, 0] - q[0, 0]).clamp_min(0) if n == 0 else p[0, 1]
        if not 0 <= y < q.shape[-1]:
            wrong.append(f"{label}: next token {y} outside the vocabulary")
        elif n != expect:
            wrong.append(f"{label}: num_accepted {n}, expected {expect}")
        elif residual[y] <= 0:
            wrong.append(f"{label}: next token {y} has no mass in {'the residual' if n == 0 else 'p'}")
    verdict.add("edge uniforms", f"wrong answers of {len(cases)} edge cases, {str(dtype)[6:]} uniforms", len(wrong), 0,
                detail="; ".join(wrong))
    verdict.seconds = time.perf_counter() - started
    return verdict
