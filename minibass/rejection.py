"""The batched rejection step of speculative sampling — exact, vectorised over the batch.

Speculative sampling (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding", Algorithm 1 and Appendix A.1; Chen et al. 2023, "Accelerating Large
Language Model Decoding with Speculative Sampling", Algorithm 2): the draft proposed
x_1..x_k with x_i ~ q_i; the target scored the same positions, giving p_1..p_{k+1}. For
i = 1..k, with u_i ~ U[0, 1):

    accept x_i  if  u_i < min(1, p_i(x_i) / q_i(x_i))          (tested as u_i * q_i(x_i) < p_i(x_i))

and stop at the first rejection. If x_{n+1} was rejected, draw the next token from the residual

    y ~ norm(max(0, p_{n+1} - q_{n+1}))

otherwise (all k accepted) draw the bonus token y ~ p_{k+1}. The emitted tokens
x_1..x_n, y are distributed exactly as autoregressive sampling from p.

Exactness details handled here:
  * the residual is never clamped to a small positive value and never divided: ``sample_from``
    draws from an unnormalised row by scaling the uniform by the row's total;
  * p == q: u * q < q always holds, so no rejection happens and the residual (all zero) is never
    needed. Only if rounding rejects such a token (probability ~1e-16) is the residual empty;
    then y is drawn from p, the limit of the residual as p - q -> 0 along p;
  * q puts zero mass where p does not: such tokens are never drafted; the residual gives them
    their full mass p. A drafted token with q(x) = 0 (a caller's padding, say) is rejected, so
    that the step stops there; it had probability 0 of being drafted, so the rule there does
    not change the output's distribution;
  * one-hot p and q (greedy): accept iff the tokens agree; otherwise y is the target's argmax.

Warping (temperature, top-k, top-p) must be identical on both sides, and ``draft_probs`` must
be the distribution the draft tokens were actually sampled from: the guarantee is that emitted
tokens follow the target's *warped* distribution p. The ratio p/q only corrects the draft if q
is what the draft tokens were truly drawn from (warped q, not a softmax of raw logits), and p
must be warped the same way, or the output follows the unwarped target. The speculative loop
sends both models' logits through the one function ``sampling.probs`` with the same
``SamplingParams``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .sampling import sample_from


def check_rejection_inputs(draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor) -> None:
    for name, t in (("draft_tokens", draft_tokens), ("draft_probs", draft_probs), ("target_probs", target_probs)):
        if not torch.is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if draft_tokens.dim() != 2 or draft_tokens.dtype != torch.long:
        raise ValueError(f"draft_tokens must be long [B, k], got {draft_tokens.dtype} {tuple(draft_tokens.shape)}")
    batch, k = draft_tokens.shape
    if draft_probs.dim() != 3 or draft_probs.shape[:2] != (batch, k) or not draft_probs.is_floating_point():
        raise ValueError(f"draft_probs must be float [B={batch}, k={k}, V], got {draft_probs.dtype} "
                         f"{tuple(draft_probs.shape)}")
    vocab = draft_probs.shape[2]
    if target_probs.dim() != 3 or tuple(target_probs.shape) != (batch, k + 1, vocab) \
            or not target_probs.is_floating_point():
        raise ValueError(f"target_probs must be float [B={batch}, k+1={k + 1}, V={vocab}], got "
                         f"{target_probs.dtype} {tuple(target_probs.shape)}")
    if len({draft_tokens.device, draft_probs.device, target_probs.device}) != 1:
        raise ValueError("draft_tokens, draft_probs and target_probs must be on one device")
    if draft_tokens.numel() and (draft_tokens.min() < 0 or draft_tokens.max() >= vocab):
        raise ValueError(f"draft_tokens must lie in [0, V={vocab})")


def accept_and_resample(draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor,
                        u_accept: Tensor, u_next: Tensor, draft_lens: Tensor | None = None,
                        *, normalise: bool = False) -> tuple[Tensor, Tensor]:
    """The rejection step with its uniforms given: u_accept [B, k], u_next [B] in [0, 1).

    draft_tokens: long [B, k]; draft_probs: [B, k, V]; target_probs: [B, k + 1, V], as for
    ``rejection_sample``, which checks them; this function does not (the loop calls it every step).

    draft_lens: optional long [B], row b drafted only its first draft_lens[b] <= k tokens (the
    rest is padding): those rows stop there, and their bonus token comes from
    target_probs[b, draft_lens[b]] — the speculative loop uses this for per-sequence lengths.
    normalise: read each row as the distribution it is proportional to (its sum, ``row_totals``,
    divides every value the rule reads), for rows that do not sum to 1 to rounding. The loop's rows
    do, and it leaves this off.
    Returns (num_accepted long [B], next_tokens long [B]). ``rejection_sample`` and the
    speculative loop (which draws uniforms from per-sequence streams) both call this.
    """
    batch, k = draft_tokens.shape
    device = target_probs.device
    lens = torch.full((batch,), k, device=device) if draft_lens is None else draft_lens.to(device)  # (B,)
    drafted = torch.arange(k, device=device)[None, :] < lens[:, None]  # (B, k): padding positions are never accepted
    # Only what the rule reads is taken to float64: one value per position, then one row per sequence
    # (and, to normalise, each row's sum).
    p_total, q_total = (row_totals(t) if normalise else None for t in (target_probs, draft_probs))  # (B, k+1), (B, k)
    p_x = target_probs[:, :k].gather(-1, draft_tokens[..., None]).squeeze(-1).double()  # (B, k): p_i(x_i)
    q_x = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1).double()  # (B, k): q_i(x_i)
    if normalise:
        p_x, q_x = p_x / p_total[:, :k], q_x / q_total
    accepted = (u_accept.to(device, torch.float64) * q_x < p_x) & (q_x > 0) & drafted  # u < min(1, p/q), no division
    num_accepted = accepted.long().cumprod(-1).sum(-1)  # (B,) length of the accepted prefix

    # The next token's distribution: max(0, p - q) at the first rejection, p_{k+1} if none
    # (q = 0 past a row's drafts, so both cases are one expression).
    rows = torch.arange(batch, device=device)
    p_n = target_probs[rows, num_accepted].double()  # (B, V)
    at = num_accepted.clamp(max=max(k - 1, 0))
    q_n = draft_probs[rows, at].double() if k else torch.zeros_like(p_n)
    if normalise:
        p_n = p_n / p_total[rows, num_accepted, None]
        q_n = q_n / q_total[rows, at, None] if k else q_n
    q_n = torch.where((num_accepted < lens)[:, None], q_n, 0.0)  # (B, V): zero after a full acceptance
    residual = (p_n - q_n).clamp_min(0)  # unnormalised; sample_from scales by its total
    residual = residual + p_n * (residual.sum(-1, keepdim=True) == 0)  # p_n in the rounding-only case, see above
    next_tokens = sample_from(residual, u_next)
    return num_accepted, next_tokens


def row_totals(probs: Tensor) -> Tensor:
    """The sum of each row of ``probs`` [..., V] -> float64 [...]; 1 for a row of zeros (padding stays zero).

    Summed in float32 for half-precision rows and in the rows' own dtype otherwise (a float64
    accumulation of float32 rows is 25 times slower on a CPU): accurate to float32 rounding, where
    the sums of half-precision rows are off by up to 1e-3."""
    wide = torch.float32 if probs.dtype in (torch.float16, torch.bfloat16) else probs.dtype
    total = probs.sum(-1, dtype=wide).double()
    return torch.where(total > 0, total, 1.0)


def rejection_sample(draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, *,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Batched speculative rejection sampling (the rule and why it is exact: the module docstring, shown
    above it on the API page).

    draft_tokens: long [B, k]; draft_probs: [B, k, V] (the distributions the drafts were sampled
    from, after warping); target_probs: [B, k+1, V] (the target's warped distributions).
    Returns num_accepted long [B] in 0..k and next_tokens long [B]; sequence b emits
    ``draft_tokens[b, :num_accepted[b]]`` then ``next_tokens[b]``.
    generator: a CPU ``torch.Generator`` for the uniforms (default: the global one).

    Each row of ``draft_probs`` and ``target_probs`` is read as the distribution it is
    proportional to: what the rule reads is divided by its row's sum (``row_totals``), so that rows
    that do not sum to 1 (float16 or bfloat16 probabilities, off by up to 1e-3) are corrected to
    float32 rounding. (The speculative loop calls ``accept_and_resample`` without this, on float32
    or float64 rows from ``sampling.probs``, whose sums are 1 to rounding.)
    """
    check_rejection_inputs(draft_tokens, draft_probs, target_probs)
    batch, k = draft_tokens.shape
    u = torch.rand(batch, k + 1, generator=generator, dtype=torch.float64)  # drawn on the CPU: same for any device
    return accept_and_resample(draft_tokens, draft_probs, target_probs, u[:, :k], u[:, k], normalise=True)
