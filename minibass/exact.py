"""Exact output distributions by enumeration (float64), used as proof.

Two distributions over the next ``n`` tokens after a prompt, for a small vocabulary V:

* ``autoregressive_distribution(model, prompt, n, params)``: plain sampling from ``model``,
  P(t_1..t_n) = prod_i p(t_i | prompt, t_<i), with p = ``sampling.probs`` (warped).
* ``speculative_distribution(target, draft, prompt, n, k, params)``: what speculative sampling
  with draft length k emits, computed by enumerating every draft x_1..x_k (probability
  q(x_i | ...)), every accept/reject event (accept with min(1, p/q)), every resampled token
  (norm(max(0, p - q))) and bonus token (p_{k+1}), round after round until n tokens are out.
  It does not call ``rejection_sample``: it is an independent statement of the algorithm.

Theorem (Leviathan et al. 2023, Appendix A.1): the two are equal. ``total_variation`` of the
two is ~1e-16 for every pair of models; the tests check it for hypothesis-generated ones.

The statement above proves the algorithm, not minibass's code for it. ``step_law`` and
``one_step_distribution`` enumerate the code itself: the exact law of what a rejection step with
its uniforms given (``rejection.accept_and_resample`` through ``shipped_step``, which passes all its
uniforms as one tensor, or any step in that form) emits,
read off the function by locating, to float64 resolution, the values of the uniforms where its
output changes. With the target's own sampling after the step, that law must again be the target's.

The two distributions above (and ``one_step_distribution``) are float64 tensors of shape [V] * n whose
entry [t_1, ..., t_n] is the probability.
Cost: O(V^n) model evaluations for the first, O((V^k)^rounds) paths for the second, memoised
per context — meant for V <= 8, n <= 4.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import torch
from torch import Tensor

from .rejection import accept_and_resample
from .sampling import SamplingParams, probs


def _next_probs_fn(model, prompt: list[int], params: SamplingParams):
    """A memoised context -> warped next-token distribution (float64 [V]) for any CausalLM."""

    @lru_cache(maxsize=None)
    def next_probs(continuation: tuple[int, ...]) -> Tensor:
        tokens = list(prompt) + list(continuation)
        cache = model.init_cache(1, len(tokens) + 1)
        logits = model.forward(torch.tensor(tokens), torch.tensor([len(tokens)]), cache, attention="naive")
        return probs(logits[-1].detach().to("cpu", torch.float64), params)

    return next_probs


def _check(prompt, n):
    if not prompt or n < 1:
        raise ValueError(f"need a non-empty prompt and n >= 1, got prompt {prompt!r} and n={n}")


def _sample_on(next_probs, out: Tensor, prefix: tuple[int, ...], mass: float) -> None:
    """Adds to ``out`` ([V] * n) the mass of every way plain sampling continues ``prefix`` to n tokens."""
    if len(prefix) == out.dim():
        out[prefix] += mass
        return
    p = next_probs(prefix)
    for t in torch.nonzero(p).flatten().tolist():
        _sample_on(next_probs, out, prefix + (t,), mass * float(p[t]))


def autoregressive_distribution(model, prompt: list[int], n: int,
                                params: SamplingParams = SamplingParams()) -> Tensor:
    """Exact P(next n tokens) of plain sampling: float64 [V] * n."""
    _check(prompt, n)
    out = torch.zeros((model.vocab_size,) * n, dtype=torch.float64)
    _sample_on(_next_probs_fn(model, prompt, params), out, (), 1.0)
    return out


def speculative_distribution(target, draft, prompt: list[int], n: int, k: int,
                             params: SamplingParams = SamplingParams()) -> Tensor:
    """Exact P(first n emitted tokens) of speculative sampling with draft length k: float64 [V] * n."""
    _check(prompt, n)
    if k < 1:
        raise ValueError(f"draft length k must be >= 1, got {k}")
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target and draft vocab sizes differ: {target.vocab_size} vs {draft.vocab_size}")
    p_of = _next_probs_fn(target, prompt, params)
    q_of = _next_probs_fn(draft, prompt, params)
    out = torch.zeros((target.vocab_size,) * n, dtype=torch.float64)

    def emit(tokens: tuple[int, ...], mass: float):
        """A round ended with `tokens` emitted so far: record or start the next round."""
        if len(tokens) >= n:
            out[tokens[:n]] += mass
        else:
            draft_step(tokens, (), mass)

    def draft_step(emitted: tuple[int, ...], accepted: tuple[int, ...], mass: float):
        """`accepted` drafts of this round so far; propose the next one or take the bonus token."""
        context = emitted + accepted
        if len(context) >= n:  # later tokens cannot change the first n: stop enumerating
            emit(context, mass)
            return
        p = p_of(context)
        if len(accepted) == k:  # all k accepted: bonus token from p_{k+1}
            for y in torch.nonzero(p).flatten().tolist():
                emit(context + (y,), mass * float(p[y]))
            return
        q = q_of(context)
        residual = (p - q).clamp_min(0)
        residual_total = float(residual.sum())
        for x in torch.nonzero(q).flatten().tolist():
            accept = min(1.0, float(p[x]) / float(q[x]))
            if accept > 0:
                draft_step(emitted, accepted + (x,), mass * float(q[x]) * accept)
            reject_mass = mass * float(q[x]) * (1.0 - accept)
            if reject_mass > 0:  # resample from norm(max(0, p - q)); empty only through rounding: then p
                dist = residual / residual_total if residual_total > 0 else p
                for y in torch.nonzero(dist).flatten().tolist():
                    emit(context + (y,), reject_mass * float(dist[y]))

    emit((), 1.0)
    return out


def shipped_step(draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """minibass's rejection step in ``step_law``'s signature: u [N, k + 1], the last column for the next token."""
    k = draft_tokens.shape[1]
    return accept_and_resample(draft_tokens, draft_probs, target_probs, u[:, :k], u[:, k])


def step_law(step_fn, draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor,
             grid: int = 16) -> dict[tuple[int, ...], float]:
    """The exact law of what ``step_fn`` emits in one step of one sequence, read off the code itself.

    ``step_fn(draft_tokens [N, k], draft_probs [N, k, V], target_probs [N, k + 1, V], u [N, k + 1])
    -> (num_accepted [N], next_tokens [N])`` is a rejection step with its uniforms given, ``u[:, :k]``
    to accept the drafts with and ``u[:, k]`` for the next token (``shipped_step`` is minibass's).
    Here ``draft_tokens`` [k], ``draft_probs`` [k, V], ``target_probs`` [k + 1, V] are one sequence's.

    What it emits, x_1..x_n then y, is a function of the point u of the unit cube [0, 1)^(k + 1). A
    threshold rule makes it constant on boxes: along each acceptance uniform the output changes at
    one value (p/q for a correct rule), along the next token's uniform at the edges of its inverse
    CDF, which depend on how many drafts were accepted. Those values are found on the function:
    where its output differs between neighbours of a grid of ``grid`` points along one uniform, the
    change is located by bisection down to adjacent float64 numbers (an edge is the first value of
    the new output). The acceptance uniforms are cut with the others at 0, where every earlier draft
    with any target mass is accepted; the next token's uniform within each box of those cuts. Each
    box [lo, hi) then adds its volume to the output at its centre, after a spot check that the
    output is the same at every corner of the box (lo or the float below hi, per uniform): a
    function that is not constant there raises ValueError. A spot check, not a proof: a change
    strictly inside a box, between grid points and away from its corners, goes unseen. A threshold
    rule has none, and the shipped step is one by construction (``rejection.accept_and_resample``).

    Returns {(x_1, ..., x_n, y): probability}, summing to 1 to float64 rounding.
    """
    k, vocab = draft_probs.shape
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError(f"grid must be an int >= 1, got {grid!r}")
    if draft_tokens.shape != (k,) or target_probs.shape != (k + 1, vocab):
        raise ValueError(f"need draft_tokens [k], draft_probs [k, V], target_probs [k + 1, V] for one sequence; got "
                         f"{tuple(draft_tokens.shape)}, {tuple(draft_probs.shape)}, {tuple(target_probs.shape)}")
    zero = torch.zeros(k + 1, dtype=torch.float64)

    def emitted(points: Tensor) -> list[tuple[int, ...]]:  # points [N, k + 1] -> what each emits
        n = len(points)
        num, nxt = step_fn(draft_tokens.expand(n, k), draft_probs.expand(n, k, vocab),
                           target_probs.expand(n, k + 1, vocab), points)
        return [tuple(draft_tokens[:a].tolist()) + (y,) for a, y in zip(num.tolist(), nxt.tolist())]

    def along(base: Tensor, coord: int, values: list[float]) -> list[tuple[int, ...]]:
        points = base.repeat(len(values), 1)
        points[:, coord] = torch.tensor(values, dtype=torch.float64)
        return emitted(points)

    def edges(base: Tensor, coord: int) -> list[float]:
        """The values of u[coord] in (0, 1) where the output changes, the other uniforms at ``base``."""
        values = [i / grid for i in range(grid)] + [math.nextafter(1.0, 0.0)]
        outs = along(base, coord, values)
        found = []
        for lo, hi, out_lo, out_hi in zip(values, values[1:], outs, outs[1:]):
            while out_lo != out_hi:  # bisect to the first change, then look on beyond it
                a, b = lo, hi
                while (mid := (a + b) / 2) not in (a, b):
                    if along(base, coord, [mid])[0] == out_lo:
                        a = mid
                    else:
                        b = mid
                found.append(b)
                lo, out_lo = b, along(base, coord, [b])[0]
        return found

    def cuts(values: list[float]) -> list[tuple[float, float]]:
        bounds = [0.0] + values + [1.0]
        return list(zip(bounds, bounds[1:]))

    def inside(a: float, b: float) -> float:  # a point of [a, b): the centre, unless it rounds onto b
        return min((a + b) / 2, math.nextafter(b, a))

    law: dict[tuple[int, ...], float] = {}
    for box in itertools.product(*(cuts(edges(zero, i)) for i in range(k))):
        centre = torch.tensor([inside(a, b) for a, b in box] + [0.5], dtype=torch.float64)
        for a_next, b_next in cuts(edges(centre, k)):
            full = list(box) + [(a_next, b_next)]
            ends = [(a, math.nextafter(b, a)) for a, b in full]  # the first and the last float of each [a, b)
            points = [[inside(a, b) for a, b in full]] + [list(c) for c in itertools.product(*ends)]
            centre_out, *corners = emitted(torch.tensor(points, dtype=torch.float64))
            if any(c != centre_out for c in corners):
                raise ValueError(f"step_fn's output is not constant on the box {full}: {centre_out} at its centre, "
                                 f"{sorted(set(corners) - {centre_out})} at some of its corners")
            law[centre_out] = law.get(centre_out, 0.0) + math.prod(b - a for a, b in full)
    return law


def one_step_distribution(step_fn, target, draft, prompt: list[int], k: int,
                          params: SamplingParams = SamplingParams()) -> Tensor:
    """Exact P(first k + 1 tokens) of one step of ``step_fn`` (``step_law``) with draft length k, continued by
    plain sampling from the target to k + 1 tokens: float64 [V] * (k + 1). For an exact step this equals
    ``autoregressive_distribution(target, prompt, k + 1, params)``. Cost: V^k drafts, each read by bisection;
    meant for V <= 4, k <= 3."""
    _check(prompt, k + 1)
    if k < 1:
        raise ValueError(f"draft length k must be >= 1, got {k}")
    p_of = _next_probs_fn(target, prompt, params)
    q_of = _next_probs_fn(draft, prompt, params)
    out = torch.zeros((target.vocab_size,) * (k + 1), dtype=torch.float64)
    for drafts in itertools.product(range(target.vocab_size), repeat=k):
        mass = math.prod(float(q_of(drafts[:i])[x]) for i, x in enumerate(drafts))  # P(the draft samples them)
        if mass == 0:
            continue
        q = torch.stack([q_of(drafts[:i]) for i in range(k)])  # (k, V)
        p = torch.stack([p_of(drafts[:i]) for i in range(k + 1)])  # (k + 1, V)
        for tokens, probability in step_law(step_fn, torch.tensor(drafts), q, p).items():
            _sample_on(p_of, out, tokens, mass * probability)
    return out


def total_variation(a: Tensor, b: Tensor) -> float:
    """0.5 * sum |a - b| of two distributions of the same shape."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return 0.5 * float((a.to(torch.float64) - b.to(torch.float64)).abs().sum())
