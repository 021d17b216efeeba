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

Both return a float64 tensor of shape [V] * n whose entry [t_1, ..., t_n] is the probability.
Cost: O(V^n) model evaluations for the first, O((V^k)^rounds) paths for the second, memoised
per context — meant for V <= 8, n <= 4.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

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


def autoregressive_distribution(model, prompt: list[int], n: int,
                                params: SamplingParams = SamplingParams()) -> Tensor:
    """Exact P(next n tokens) of plain sampling: float64 [V] * n."""
    _check(prompt, n)
    next_probs = _next_probs_fn(model, prompt, params)
    out = torch.zeros((model.vocab_size,) * n, dtype=torch.float64)

    def expand(prefix: tuple[int, ...], mass: float):
        if len(prefix) == n:
            out[prefix] += mass
            return
        p = next_probs(prefix)
        for t in torch.nonzero(p).flatten().tolist():
            expand(prefix + (t,), mass * float(p[t]))

    expand((), 1.0)
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


def total_variation(a: Tensor, b: Tensor) -> float:
    """0.5 * sum |a - b| of two distributions of the same shape."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return 0.5 * float((a.to(torch.float64) - b.to(torch.float64)).abs().sum())
