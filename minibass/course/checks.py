"""The exercise checks of the course, one per chapter exercise.

Each ``check_*`` runs the learner's function on many cases, compares it with minibass's own
answer (or with an exact distribution) and prints a ``Report``: ``Passed``, or ``Failed`` with a
table of what differed. With ``quiet=True`` it returns the report instead of printing it (the
tests do this); printed, it returns None, so that a notebook does not show the report twice. An exception raised by the learner's code (the
notebook's stub raises ``NotImplementedError``) is a failure with its message, never a crash of
the check. The test suite proves that each check fails on the stub and on a planted wrong
answer, and passes on the chapter's reference solution.
"""

from __future__ import annotations

import functools
import math
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from . import FAST, Report


def _check(name: str):
    """Turns ``body(report, *args)`` into a check that catches the learner's exceptions and prints."""
    def wrap(body):
        @functools.wraps(body)
        def run(*args, quiet: bool = False, **kwargs) -> Report | None:
            report = Report(name)
            try:
                body(report, *args, **kwargs)
            except NotImplementedError as e:
                report.error = f"not written yet ({e or 'NotImplementedError'})"
            except Unreadable as e:  # the learner's function returned something the check cannot read
                report.error = str(e)
            except Exception as e:  # the learner's code raised: show where
                report.error = _raised(e)
            if quiet:
                return report
            print(report)
            return None
        return run
    return wrap


def _learners(filename: str) -> bool:
    """Whether a traceback frame's file is the learner's: not minibass's, not the standard library's, not an
    installed package's (the oracle's test, which tells an engine's frames from minibass's the same way)."""
    from ..oracle.verdict import is_library  # here, not at the top: the oracle imports SciPy, a chapter may not need it

    return not is_library(filename)

class Unreadable(Exception):
    """What a learner's function returned is not what its exercise asks for (``_read``)."""


def _read(convert, value, call: str, expected: str):
    """``convert(value)``, or an ``Unreadable`` naming the call, what it returned and what was expected."""
    try:
        return convert(value)
    except (TypeError, ValueError, RuntimeError, ArithmeticError) as e:
        raise Unreadable(f"{call} returned {value!r:.100}; expected {expected} ({type(e).__name__}: {e})") from None


# Mistakes whose exception says what broke but not what to change: (the exception's type and a piece of
# its message, the function that raised, or None for any), and what to tell the learner.
HINTS = [
    ((ValueError, "cache capacity"), None, "did your step roll both caches back (phase 5) after emitting?"),
    ((TypeError, "'NoneType'"), "_record", "your step must return n, long [B]: the drafts each sequence accepted"),
]


def _raised(e: Exception) -> str:
    """What an exception from the learner's code says, where it was raised (the learner's own line if any),
    and a hint for the common mistakes of ``HINTS``."""
    frames = traceback.extract_tb(e.__traceback__)
    theirs = [f for f in frames if _learners(f.filename)]
    deepest = frames[-1]
    where = f"line {deepest.lineno} of {deepest.name}, {Path(deepest.filename).name}"
    if theirs and theirs[-1] != deepest:
        where += f"; called from your line {theirs[-1].lineno} of {theirs[-1].name}"
    message = str(e) if len(str(e)) <= 300 else str(e)[:300] + " ..."
    text = f"{type(e).__name__}: {message} ({where})"
    for (kind, piece), function, hint in HINTS:
        if isinstance(e, kind) and piece in str(e) and function in (None, deepest.name):
            text += f"\n  hint: {hint}"
    return text


# ---- chapter 01: the roofline ------------------------------------------------------------------------------

@_check("roofline step time and critical batch")
def check_roofline(report: Report, roofline_time, critical_batch):
    """roofline_time(flops, bytes, peak, bandwidth) -> seconds; critical_batch(shape, hw) -> int."""
    from .. import costmodel as cm

    g = np.random.default_rng(1)
    for _ in range(20):
        flops, nbytes = 10 ** g.uniform(6, 14), 10 ** g.uniform(6, 11)
        peak, bw = 10 ** g.uniform(10, 15), 10 ** g.uniform(9, 13)
        want = max(flops / peak, nbytes / bw)
        got = _read(float, roofline_time(flops, nbytes, peak, bw), "roofline_time(flops, bytes, peak, bandwidth)",
                    "a number of seconds")
        report.cases += 1
        if not math.isclose(got, want, rel_tol=1e-9):
            report.rows.append({"case": f"flops {flops:.3g}, bytes {nbytes:.3g}, peak {peak:.3g}, bw {bw:.3g}",
                                "expected": want, "got": got})
    shapes = {"demo-like 12x256": cm.ModelShape(12, 256, 8, 4, 688, 4096),
              "7B-like 32x4096": cm.ModelShape(32, 4096, 32, 32, 11008, 32000, tied=False)}
    for name, shape in shapes.items():
        for hw in cm.GPUS:
            want = cm.critical_batch(shape, hw)
            got = _read(_whole, critical_batch(shape, hw), f"critical_batch(shape, {hw.name})", "an int (a batch size)")
            report.cases += 1
            if got != want:
                report.rows.append({"case": f"{name} on {hw.name}", "expected": want, "got": got})


# ---- chapter 02: packing ragged prompts --------------------------------------------------------------------

@_check("positions of packed tokens")
def check_positions(report: Report, positions_fn):
    """positions_fn(q_lens, lengths) -> long [sum(q_lens)]: each packed token's absolute position."""
    from ..cache import pack_positions

    g = torch.Generator().manual_seed(2)
    cases = [([3, 1, 2], [0, 0, 0]), ([1, 1], [5, 9]), ([0, 2, 0, 1], [4, 4, 7, 0])]
    for _ in range(30):
        b = int(torch.randint(1, 7, (1,), generator=g))
        cases.append((torch.randint(0, 5, (b,), generator=g).tolist(), torch.randint(0, 20, (b,), generator=g).tolist()))
    for q_lens, lengths in cases:
        q, c = torch.tensor(q_lens), torch.tensor(lengths)
        want = pack_positions(q, c)[2]
        answer = positions_fn(q.clone(), c.clone())
        report.cases += 1
        if not torch.is_tensor(answer) or answer.dtype != torch.long:
            report.rows.append({"q_lens": q_lens, "lengths": lengths, "expected": "a long tensor",
                                "got": str(answer.dtype) if torch.is_tensor(answer) else type(answer).__name__})
            if torch.is_tensor(answer) and answer.is_floating_point() and not answer.numel():
                report.hint = "torch.tensor([]) is float32: build the result with dtype=torch.long"
            continue
        got = answer.flatten()
        if got.shape != want.shape or not torch.equal(got, want):
            report.rows.append({"q_lens": q_lens, "lengths": lengths, "expected": want.tolist(), "got": got.tolist()})


# ---- chapter 03: one accept / resample position ------------------------------------------------------------

def _p_q_cases(seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    out = [(torch.tensor([0.4, 0.3, 0.2, 0.1]), torch.tensor([0.1, 0.2, 0.3, 0.4])),
           (torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.25, 0.25, 0.25, 0.25])),  # p(x) = 0 for some x ~ q
           (torch.tensor([0.25, 0.25, 0.25, 0.25]), torch.tensor([0.7, 0.3, 0.0, 0.0])),  # q(x) = 0 for some x
           (torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0.1, 0.2, 0.3, 0.4]))]  # p == q: nothing rejected
    for _ in range(12):
        p, q = torch.rand(4, generator=g) ** 3, torch.rand(4, generator=g) ** 3
        p[torch.rand(4, generator=g) < 0.2] = 0
        p[0] += 1e-3
        out.append((p, q))
    return [(p.double() / p.double().sum(), q.double() / q.double().sum()) for p, q in out]


def emitted_distribution(accept_probability, residual, p, q):
    """Exact distribution of the emitted token: draft x ~ q, keep it with accept_probability(p, q, x),
    else draw from residual(p, q)."""
    out = torch.zeros_like(p)
    rejected = 0.0
    for x in range(len(q)):
        if q[x] > 0:
            a = _read(float, accept_probability(p.clone(), q.clone(), x), f"accept_probability(p, q, {x})",
                      "one number, the chance of keeping token x")  # copies: the learner's code may write into them
            out[x] += q[x] * a
            rejected += float(q[x]) * (1 - a)
    if rejected > 1e-15:
        out += rejected * _read(lambda r: torch.as_tensor(r, dtype=torch.float64).reshape(len(p)),
                                residual(p.clone(), q.clone()), "residual(p, q)", f"a distribution of {len(p)} numbers")
    return out


@_check("accept with min(1, p/q), resample from norm(max(0, p - q))")
def check_accept_resample(report: Report, accept_probability, residual, rows: int | None = None, alpha: float = 1e-6):
    """Enumeration (total variation <= 1e-12) and a G-test on sampled rows, for each (p, q) case."""
    from ..oracle.stats import critical_value, g_test

    rows = rows or (20_000 if FAST else 100_000)
    g = np.random.default_rng(3)
    cases = _p_q_cases()
    for i, (p, q) in enumerate(cases):
        # A probability first: p/q alone gives the right enumeration (q(x) * p(x)/q(x) = p(x), and the negative
        # "rejected" mass cancels), but a program cannot keep a token with probability 4.
        outside = None
        for x in range(len(q)):
            a = _read(float, accept_probability(p.clone(), q.clone(), x), f"accept_probability(p, q, {x})",
                      "one number, the chance of keeping token x") if q[x] > 0 else 0.0
            if not -1e-12 <= a <= 1 + 1e-12:
                outside = x, a
                break
        if outside:
            x, a = outside
            report.cases += 1
            report.rows.append({"case": i, "check": f"accept probability of x = {x}", "p": _r(p), "q": _r(q),
                                "got": f"{a:.4g}, not in [0, 1]"})
            report.hint = "an acceptance probability must be in [0, 1]: min(1, p(x) / q(x))"
            continue
        out = emitted_distribution(accept_probability, residual, p, q)
        tv = 0.5 * float((out - p).abs().sum())
        report.cases += 1
        if not tv <= 1e-12:
            report.rows.append({"case": i, "check": "enumeration", "p": _r(p), "q": _r(q), "emitted": _r(out),
                                "TV": tv})
    if report.rows:  # enumeration already shows what is wrong: no sampled test on top of it
        return
    p, q = cases[0]  # sampled, as a program would run it
    xs = g.choice(4, size=rows, p=q.numpy() / q.numpy().sum())
    accept = np.array([float(accept_probability(p.clone(), q.clone(), x)) for x in range(4)])[xs]
    kept = g.random(rows) < accept
    r = torch.as_tensor(residual(p.clone(), q.clone()), dtype=torch.float64).clamp(min=0).numpy()
    ys = g.choice(4, size=rows, p=r / r.sum())
    counts = Counter(np.where(kept, xs, ys).tolist())
    test = g_test(counts, {x: float(p[x]) for x in range(4)})
    report.cases += 1
    if test.statistic > critical_value(test.dof, alpha):
        report.rows.append({"case": 0, "check": f"G-test, {rows} rows", "p": _r(p), "q": _r(q),
                            "emitted": _r(torch.tensor([counts[x] / rows for x in range(4)])),
                            "TV": f"G = {test.statistic:.1f} > {critical_value(test.dof, alpha):.1f}"})


def _whole(x) -> int:
    """An int, or a number equal to one (3.0); 3.9 is an error, not 3."""
    if isinstance(x, bool) or float(x) != int(float(x)):
        raise ValueError(f"{x!r} is not a whole number")
    return int(float(x))


def _r(t) -> str:
    return "[" + ", ".join(f"{float(x):.3f}" for x in t) + "]"


# ---- chapter 04: telling exact samplers from broken ones ---------------------------------------------------

@_check("is_exact classifies two exact samplers and every known bug")
def check_is_exact(report: Report, is_exact):
    """is_exact(sampler) -> bool, for rejection_sample and a second exact sampler (True) and each
    oracle.known_bugs.SAMPLERS (False)."""
    from ..oracle.known_bugs import SAMPLERS, textbook
    from ..rejection import rejection_sample

    for name, sampler, want in [("rejection_sample", rejection_sample, True),
                                ("known_bugs.textbook (also exact)", textbook, True),
                                *((n, s, False) for n, s in SAMPLERS.items())]:
        got = bool(is_exact(sampler))
        report.cases += 1
        if got != want:
            report.rows.append({"sampler": name, "expected": want, "got": got})


# ---- chapter 05: what the caches keep after a step ---------------------------------------------------------

def kept_lengths_reference(target_len: int, k: int, n: int) -> tuple[int, int]:
    """The loop's invariants (minibass/speculative.py): a sequence of m = target_len + 1 tokens drafts k
    and accepts n; the target keeps m + n tokens, the draft min(m + k - 1, m + n)."""
    m = target_len + 1
    return m + n, min(m + k - 1, m + n)


@_check("cache lengths kept after a step, for every n <= k")
def check_kept_lengths(report: Report, kept_lengths):
    """kept_lengths(target_len, k, n) -> (target cache length, draft cache length) after roll-back."""
    for target_len in (0, 1, 7, 30):
        for k in range(1, 7):
            for n in range(k + 1):
                want = kept_lengths_reference(target_len, k, n)
                got = _read(lambda t: tuple(_whole(x) for x in t), kept_lengths(target_len, k, n),
                            f"kept_lengths({target_len}, {k}, {n})", "(target cache length, draft cache length)")
                report.cases += 1
                if got != want:
                    report.rows.append({"target_len": target_len, "k": k, "n": n, "expected": want, "got": got})


def _given_back(report: Report, answer, ours: dict) -> bool:
    """True (and a failing row) when ``answer`` is one of minibass's own objects ``ours`` ({name: object}):
    an exercise wants the learner's code, and the check compares with ours."""
    name = next((n for n, obj in ours.items() if answer is obj), None)
    if name is not None:
        report.cases += 1
        report.rows.append({"check": "your own code", "expected": "code you wrote", "got": f"{name} itself"})
    return name is not None


# ---- chapter 06: BASS-PAD ----------------------------------------------------------------------------------

@_check("BASS-PAD attention against the float64 specification")
def check_padded_attention(report: Report, attention_fn, cases: int | None = None):
    """attention_fn has the signature of minibass.attention (``minibass/attention/base.py``); ragged batches
    with idle sequences, GQA, odd head dims and NaN / inf in every stale cache slot."""
    from ..attention import BACKENDS
    from ..oracle import check_attention
    from ..oracle.attention import LARGE_SCORE_ATOL

    if _given_back(report, attention_fn, {f"minibass.attention.BACKENDS[{n!r}]": b for n, b in BACKENDS.items()}):
        return
    one = torch.randn(1, 2, 16), torch.randn(1, 1, 4, 16), torch.randn(1, 1, 4, 16)
    attention_fn(*one, torch.tensor([1]), torch.tensor([3]))  # a stub raises here, before the oracle's cases
    cases = cases or (30 if FAST else 100)
    verdict = check_attention(attention_fn, cases=cases)
    report.cases, report.unit = len(verdict.checks), "checks"  # each row names its cases and how many failed
    for c in verdict.failures():
        if c.name.endswith("on large scores"):  # a count of cases, not an error
            report.rows.append({"check": c.name, "max error": "inf, NaN or too far",
                                "tolerance": f"finite, within {LARGE_SCORE_ATOL[torch.float32]:g}", "case": c.detail})
            if "running maximum" in c.detail:  # the oracle's own diagnosis: right on smaller scores
                report.hint = ("on scores up to about 160 the output was not finite or far off: exp overflowed? "
                               "Subtract each row's maximum score before exp (the softmax is the same)")
        else:
            report.rows.append({"check": c.name, "max error": c.statistic, "tolerance": c.threshold, "case": c.detail})


# ---- chapter 07: the online softmax ------------------------------------------------------------------------

def online_softmax_reference(m_i, l_i, acc, scores, v):
    """One KV block of the online softmax (Milakov & Gimelshein 2018; FlashAttention):
    m_new = max(m_i, rowmax(s)); alpha = exp(m_i - m_new); P = exp(s - m_new);
    l_new = alpha l_i + rowsum(P); acc_new = alpha acc + P V."""
    m_new = torch.maximum(m_i, scores.max(1).values)  # (M,)
    alpha = torch.exp(m_i - m_new)  # (M,)  0 when m_i = -inf (first block)
    p = torch.exp(scores - m_new[:, None])  # (M, N)
    return m_new, alpha * l_i + p.sum(1), alpha[:, None] * acc + p @ v


@_check("online softmax: one KV block at a time equals the whole softmax")
def check_online_softmax(report: Report, step_fn):
    """step_fn(m_i [M], l_i [M], acc [M, D], scores [M, N], v [N, D]) -> (m_new, l_new, acc_new)."""
    if _given_back(report, step_fn, {"online_softmax_reference (the chapter's import)": online_softmax_reference}):
        return
    g = torch.Generator().manual_seed(7)
    for case in range(14):
        m_rows, d, blocks, n = 1 + case % 5, 3 + case % 4, 1 + case % 4, 16
        if case >= 12:
            blocks = 3
        scores = torch.randn(m_rows, blocks * n, generator=g, dtype=torch.float64) * (1 + 10 * (case % 3))
        scores += 1000.0 * (case % 4 == 3)  # large scores: exp overflows unless the maximum is subtracted
        scores[torch.rand(scores.shape, generator=g) < 0.3] = float("-inf")  # masked keys
        scores[:, ::n] = torch.randn(m_rows, blocks, generator=g, dtype=torch.float64)  # >= 1 visible per block
        if case == 12:  # the first block's scores far above the later ones': the running maximum must be kept
            scores[:, :n] += 1000.0
        if case == 13:  # a block whose every key is masked, after the first: it must change nothing
            scores[:, n:2 * n] = float("-inf")
        v = torch.randn(blocks * n, d, generator=g, dtype=torch.float64)
        want = torch.softmax(scores, 1) @ v
        m_i = torch.full((m_rows,), float("-inf"), dtype=torch.float64)
        l_i, acc = torch.zeros(m_rows, dtype=torch.float64), torch.zeros(m_rows, d, dtype=torch.float64)
        for j in range(blocks):
            m_i, l_i, acc = step_fn(m_i, l_i, acc, scores[:, j * n:(j + 1) * n], v[j * n:(j + 1) * n])
        got = acc / l_i[:, None]
        report.cases += 1
        err = float((got - want).abs().max()) if got.shape == want.shape else float("inf")
        if not err <= 1e-10:
            report.rows.append({"case": case, "rows": m_rows, "blocks": blocks, "max error": err, "tolerance": 1e-10})


# ---- chapters 08 and 09: the loop, and a draft-length policy -----------------------------------------------

def table_pair(vocab: int = 5, seed: int = 11, noise: float = 0.8):
    """A small lookup-table target and a draft: the target's logits plus noise of std ``noise`` (0.8: the
    draft roughly agrees, a draft token is accepted about 0.6 of the time; 0.2: about 0.86; 3.0: about 0.32)."""
    from ..table import TableLM

    target = TableLM.random(vocab, order=1, seed=seed, sharpness=1.5)
    draws = torch.randn(target.table.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return target, TableLM(target.table + noise * draws, order=1)


@functools.lru_cache(maxsize=1)
def llama_pair():
    """The oracle's tiny Llama target and draft (vocabulary 6, two layers), as minibass decoders. Unlike the
    table pair, their output depends on every cached position, so a wrong cache shows."""
    import tempfile

    from ..loading import load_model
    from ..oracle.generator import write_pair

    with tempfile.TemporaryDirectory() as folder:
        target_dir, draft_dir = write_pair(folder)
        return load_model(target_dir), load_model(draft_dir)


def _fit(report: Report, label: str, run, target, n_tokens: int = 2, samples: int = 3000, alpha: float = 1e-6):
    """G-test of the first n_tokens of ``run(prompts, n, seed)`` against the target's exact distribution."""
    from .. import exact
    from ..oracle.stats import critical_value, g_test

    prompt = [1, 4, 2]
    want = exact.autoregressive_distribution(target, prompt, n_tokens)
    exact_events = {tuple(ix): float(want[tuple(ix)]) for ix in torch.nonzero(want > 0).tolist()}
    tokens = run([prompt] * samples, n_tokens, 5)
    counts = Counter(tuple(t[:n_tokens]) for t in tokens)
    test = g_test(counts, exact_events)
    report.cases += 1
    if test.statistic > critical_value(test.dof, alpha):
        report.rows.append({"check": f"{label}: G-test of {samples} samples of {n_tokens} tokens",
                            "statistic": test.statistic, "threshold": critical_value(test.dof, alpha)})


@_check("an assembled step: greedy and seeded equality, its four phases timed, and the output distribution")
def check_step(report: Report, step_fn):
    """step_fn has the signature of minibass.speculative.step; it replaces the loop's step. It must time its
    four phases (``timer("draft")`` ... ``timer("rollback")``), as the loop's stats and ``"auto"`` read them."""
    from .. import SamplingParams, generate, speculative_generate
    from ..speculative import step

    if _given_back(report, step_fn, {"minibass.speculative.step": step}):
        return
    target, draft = llama_pair()
    prompts = [[1], [2, 3, 4], [0, 0], [4, 1, 2, 3, 0, 1, 5]]
    greedy = SamplingParams(temperature=0.0)
    want = generate(target, prompts, 12, sampling=greedy).tokens
    phases = ("draft", "verify", "accept", "rollback")
    for k in (1, 3):
        try:
            result = speculative_generate(target, draft, prompts, 12, sampling=greedy, draft_length=k, step=step_fn)
        except KeyError as e:  # the loop reads timer.last["draft"] after every step
            if not e.args or e.args[0] not in phases:
                raise
            report.cases += 1
            report.rows.append({"check": f"greedy, k={k}", "expected": "a step that times its phases",
                                "got": f"no timer({e}) block: wrap each phase in `with timer(name):`"})
            return
        got = result.tokens
        accepted = speculative_generate(target, draft, prompts, 12, sampling=greedy, draft_length=k).stats.accepted
        missing = [name for name in phases if name not in result.stats.time_split]
        report.cases += 1
        if missing:
            report.rows.append({"check": f"greedy, k={k}, phases timed", "expected": ", ".join(phases),
                                "got": f"missing {', '.join(missing)}: wrap each phase in `with timer(name):`"})
        if got != want:
            bad = next(b for b in range(len(prompts)) if got[b] != want[b])
            report.rows.append({"check": f"greedy, k={k}, sequence {bad}", "expected": want[bad], "got": got[bad]})
            report.hint = report.hint or ("the phases run in minibass's order: draft, verify, accept, then emit "
                                          "(the sequences grow, seq_lens with them), then rollback, which cuts "
                                          "the caches to the new seq_lens")
        elif result.stats.accepted != accepted:  # right tokens, but the step returned something other than n
            step_no = next(i for i, (a, b) in enumerate(zip(result.stats.accepted, accepted)) if a != b) \
                if len(result.stats.accepted) == len(accepted) else 0
            report.rows.append({"check": f"greedy, k={k}, what your step returns (stats.accepted, step {step_no})",
                                "expected": accepted[step_no] if step_no < len(accepted) else "-",
                                "got": result.stats.accepted[step_no] if step_no < len(result.stats.accepted) else "-"})
            report.hint = ("return n, long [B]: how many drafts each sequence accepted (the loop's stats and policies "
                           "read it)")
        # Greedy runs on this pair rarely accept two drafts in a step, so a step that drafts other lengths than
        # draft_lens says can pass them; a seeded sampled run cannot: a step assembled from the phases draws the
        # same uniforms from the same streams as minibass's own step, so it gives the same tokens.
        sampled = SamplingParams(temperature=1.0)
        want_s = speculative_generate(target, draft, prompts, 12, sampling=sampled, draft_length=k, seed=0).tokens
        got_s = speculative_generate(target, draft, prompts, 12, sampling=sampled, draft_length=k, seed=0,
                                     step=step_fn).tokens
        report.cases += 1
        if got_s != want_s:
            bad = next(b for b in range(len(prompts)) if got_s[b] != want_s[b])
            report.rows.append({"check": f"sampled, k={k}, seed 0, sequence {bad}", "expected": want_s[bad],
                                "got": got_s[bad]})
            report.hint = report.hint or ("draft draft_lens[b] tokens for sequence b, and pass each phase what "
                                          "minibass's step passes it (the same tensors, the same generators)")
    _fit(report, "sampled, k=3", lambda p, n, seed: speculative_generate(
        target, draft, p, n, draft_length=3, seed=seed, step=step_fn).tokens, target, n_tokens=3)


POLICY_COSTS = dict(draft_call=0.08, verify_base=1.0, verify_per_token=0.05)  # in regular-step units


def policy_cost(policy_or_k, *, batch: int = 64, tokens: int = 64, seed: int = 0, noise: float = 0.8) -> float:
    """Cost per emitted token of a sampled run (temperature 1, fixed seed) on ``table_pair(noise=noise)``, in
    regular-step units: each step costs
    ``POLICY_COSTS`` (one verify of k + 1 tokens and k draft calls), counted from the run, not timed."""
    from .. import SamplingParams, speculative_generate
    from ..draft_length import DraftCosts

    target, draft = table_pair(noise=noise)
    prompts = [[b % target.vocab_size] for b in range(batch)]
    result = speculative_generate(target, draft, prompts, tokens, draft_length=policy_or_k, seed=seed,
                                  sampling=SamplingParams(temperature=1.0))
    costs = DraftCosts(**POLICY_COSTS)
    return sum(costs.step(k) for k in result.stats.draft_lengths) / result.stats.new_tokens


# Two drafts, one close to the target (the best fixed k is 6) and one far from it (the best is 2): no single
# fixed length is within the margin on both, so a policy passes only if it adapts to what it sees. Each cost
# is the mean over POLICY_SEEDS runs, so that one lucky run does not decide the best fixed k.
POLICY_DRAFTS = {"close draft (acceptance ~0.86)": 0.2, "far draft (acceptance ~0.32)": 3.0}
POLICY_SEEDS = (0, 1, 2)


def _mean_policy_cost(make, noise: float) -> float:
    return sum(policy_cost(make(), noise=noise, seed=seed) for seed in POLICY_SEEDS) / len(POLICY_SEEDS)


@_check("a draft-length policy: exact output, cost near the best fixed k with a close and a far draft")
def check_policy(report: Report, make_policy, margin: float = 0.10):
    """make_policy() -> a fresh policy object (lengths / update, see minibass.draft_length)."""
    from .. import speculative_generate

    if not isinstance(make_policy, type) and hasattr(make_policy, "lengths"):  # a policy, not what makes one
        report.error = (f"got a policy object ({type(make_policy).__name__}); pass what makes one, e.g. the class "
                        f"{type(make_policy).__name__} itself: every run needs a fresh policy")
        return
    target, draft = table_pair()
    _fit(report, "sampled", lambda p, n, seed: speculative_generate(
        target, draft, p, n, draft_length=make_policy(), seed=seed).tokens, target)
    for label, noise in POLICY_DRAFTS.items():
        best = min((_mean_policy_cost(lambda k=k: k, noise), k) for k in range(1, 9))
        got = _mean_policy_cost(make_policy, noise)
        report.cases += 1
        if got > best[0] * (1 + margin):
            report.rows.append({"check": f"cost per token (regular steps), {label}",
                                "best fixed k": f"{best[0]:.4g} (k={best[1]})", "yours": f"{got:.4g}",
                                "allowed": f"{best[0] * (1 + margin):.4g}"})


# ---- chapter 10: predicting tokens per second --------------------------------------------------------------

@_check("predicted tokens/s within 25% of a live run")
def check_prediction(report: Report, predict, run: dict, tolerance: float = 0.25, model_tolerance: float = 0.05):
    """predict(regular, verify, draft, k, alpha, batch) -> tokens/s; ``run`` holds those inputs (seconds per
    regular step, per speculative step outside the draft phase, per draft call; acceptance alpha) and the
    measured tokens/s. First, on made-up inputs with very different k and alpha, the prediction must stay
    within ``model_tolerance`` (5 %) of the cost model: exact inputs, so no timing noise to allow for, and
    an answer one draft call or one accepted token off is 7 to 17 % away; then within ``tolerance`` (25 %)
    of the live run, whose timings move."""
    from ..draft_length import expected_tokens

    keys = ("regular", "verify", "draft", "k", "alpha", "batch")
    for case in [dict(regular=0.01, verify=0.012, draft=0.001, k=1, alpha=0.2, batch=1),
                 dict(regular=0.01, verify=0.015, draft=0.002, k=6, alpha=0.9, batch=4),
                 dict(regular=0.02, verify=0.030, draft=0.001, k=3, alpha=0.6, batch=16)]:
        want = case["batch"] * expected_tokens(case["alpha"], case["k"]) / (case["verify"] + case["k"] * case["draft"])
        got = _read(float, predict(*(case[k] for k in keys)), "predict(...)", "a number of tokens per second")
        report.cases += 1
        if not abs(got / want - 1) <= model_tolerance:
            report.rows.append({"inputs": ", ".join(f"{k}={case[k]}" for k in keys[::-1]), "predicted tokens/s": got,
                                "cost model": want, "off by": f"{got / want - 1:+.1%}",
                                "allowed": f"±{model_tolerance:.0%}"})
    got = _read(float, predict(*(run[k] for k in keys)), "predict(...)", "a number of tokens per second")
    report.cases += 1
    if not abs(got / run["tokens_per_second"] - 1) <= tolerance:
        report.rows.append({"inputs": "the live run", "predicted tokens/s": got,
                            "measured tokens/s": run["tokens_per_second"],
                            "off by": f"{got / run['tokens_per_second'] - 1:+.0%}", "allowed": f"±{tolerance:.0%}"})
        if len(report.rows) == 1:  # the made-up cases agree with the cost model: the timings may have moved
            report.hint = ("Only the live run differs. Timings move when the machine is busy: run the cell "
                           "with measure_run and this one again.")


# ---- chapter 11: an adapter for someone else's sampler -----------------------------------------------------

def foreign_sampler(draft_tokens: list[int], q: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Another engine's rejection step, one sequence at a time, numpy in and out: q [k, V], p [k + 1, V];
    returns the emitted tokens (the accepted drafts, then one more)."""
    out = []
    for i, x in enumerate(draft_tokens):
        if rng.random() * q[i, x] < p[i, x]:  # u < p/q, without dividing
            out.append(int(x))
            continue
        residual = np.maximum(p[i] - q[i], 0)
        out.append(int(rng.choice(len(residual), p=residual / residual.sum())))
        return out
    out.append(int(rng.choice(p.shape[1], p=p[len(draft_tokens)] / p[len(draft_tokens)].sum())))
    return out


def foreign_sampler_buggy(draft_tokens: list[int], q: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> list[int]:
    """The planted twin: after a rejection it resamples from p itself instead of the residual."""
    out = []
    for i, x in enumerate(draft_tokens):
        if rng.random() * q[i, x] < p[i, x]:
            out.append(int(x))
            continue
        out.append(int(rng.choice(p.shape[1], p=p[i] / p[i].sum())))
        return out
    out.append(int(rng.choice(p.shape[1], p=p[len(draft_tokens)] / p[len(draft_tokens)].sum())))
    return out


@_check("an adapter: the oracle passes the sampler and fails its planted twin")
def check_adapter(report: Report, wrap, rows: int | None = None):
    """wrap(foreign) -> a function with rejection_sample's signature calling ``foreign`` row by row."""
    from ..oracle import check_sampler

    rows = rows or (20_000 if FAST else 50_000)
    sampler = wrap(foreign_sampler)  # reproducible from the torch generator: same seed, same tokens
    from ..oracle.sampler import draft_rows, setups

    p, q = setups()["temperature"]
    inputs = draft_rows(p, q, 200, torch.Generator().manual_seed(0))
    outs = [sampler(*inputs, generator=torch.Generator().manual_seed(seed)) for seed in (1, 1, 2)]
    one = torch.Generator().manual_seed(3)  # one generator, two calls: the second must draw other numbers
    outs += [sampler(*inputs, generator=one), sampler(*inputs, generator=one)]

    def equal(a, b):
        return all(torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(a, b))

    problem = ("equal seeds gave different tokens" if not equal(outs[0], outs[1]) else
               "the torch generator is ignored" if equal(outs[0], outs[2]) else
               "two calls with one generator gave the same tokens: draw from it (torch.randint(..., generator="
               "generator)), which moves it on, rather than reading its seed" if equal(outs[3], outs[4]) else "")
    report.cases += 1
    if problem:
        report.rows.append({"sampler": "foreign_sampler", "oracle verdict": "-",
                            "expected": "same tokens for equal torch seeds, others for another seed or a later call",
                            "first failed check": problem})
    for name, foreign, want in (("foreign_sampler", foreign_sampler, True),
                                ("foreign_sampler_buggy", foreign_sampler_buggy, False)):
        verdict = check_sampler(wrap(foreign), rows=rows)
        report.cases += 1
        if verdict.ok != want:
            failed = verdict.failures()
            report.rows.append({"sampler": name, "oracle verdict": "PASS" if verdict.ok else "FAIL",
                                "expected": "PASS" if want else "FAIL",
                                "first failed check": f"{failed[0].name}: {failed[0].detail}" if failed else "-"})
            if want:
                report.hint = (f"print(oracle.check_sampler(wrap({name}))) shows the whole verdict: what your adapter "
                               "returned, and for each failed check the events furthest off")


def measure_run(target, draft, prompts: list[list[int]], k: int, new_tokens: int, seed: int = 0,
                rounds: int = 3) -> dict:
    """What chapter 10's exercise predicts from, and what it is checked against, both measured now.

    Calibration: speculative runs with draft length k on the same batch (prompts in reverse order,
    other seeds) give the seconds per step spent outside the draft phase (``verify``: the verify
    call, the rejection step and the roll-back), the seconds per draft call (``draft``) and the
    acceptance ``alpha`` (from their mean accepted prefix); regular runs give the seconds per
    regular step (``regular``). The live runs give ``tokens_per_second``. The three kinds of run
    take turns, ``rounds`` times, and each number is the median over rounds: a slow spell of the
    machine, which lasts seconds, then moves one round, not the answer.
    """
    import statistics

    from .. import SamplingParams, generate, speculative_generate
    from ..costmodel import alpha_from_accepted

    warm = SamplingParams(temperature=1.0)
    speculative_generate(target, draft, prompts, 4, draft_length=k, seed=seed)  # warm-up
    calibration, regular, live = [], [], []
    for r in range(rounds):
        c = speculative_generate(target, draft, prompts[::-1], new_tokens, draft_length=k, seed=seed + 1 + r,
                                 sampling=warm).stats
        calibration.append(((c.time_split["verify"] + c.time_split["accept"] + c.time_split["rollback"]) / c.steps,
                            c.time_split["draft"] / sum(c.draft_lengths), c.mean_accepted))
        g = generate(target, prompts[::-1], new_tokens, seed=seed + 1 + r, sampling=warm).stats
        regular.append(g.wall_time / g.steps)
        live.append(speculative_generate(target, draft, prompts, new_tokens, draft_length=k, seed=seed,
                                         sampling=warm).stats)
    median = statistics.median
    return {"regular": median(regular), "verify": median(c[0] for c in calibration),
            "draft": median(c[1] for c in calibration), "k": k, "batch": len(prompts),
            "alpha": alpha_from_accepted(sum(c[2] for c in calibration) / rounds, k),
            "tokens_per_second": median(s.tokens_per_second for s in live),
            "alpha_live": alpha_from_accepted(sum(s.mean_accepted for s in live) / rounds, k)}
