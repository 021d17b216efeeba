"""A gallery of broken rejection samplers and attention backends, each a bug class real engines shipped.

Every sampler here has ``rejection_sample``'s signature
``(draft_tokens [B, k], draft_probs [B, k, V], target_probs [B, k+1, V], *, generator) ->
(num_accepted [B], next_tokens [B])`` and is wrong in exactly one way; ``check_sampler`` must
fail each of them (``tests/test_oracle.py`` checks that it does, and the course shows their
statistics). ``UNIFORM_SAMPLERS`` take their uniforms (``accept_and_resample``'s signature) and
hold a bug that only a given-uniforms probe sees. ``ATTENTION`` holds broken attention backends
that ``check_attention`` must fail.

They all start from the same textbook step (``_textbook``), written as plainly as possible:

    accept x_i  iff  u_i * q_i(x_i) < p_i(x_i)       for i = 1.. until the first rejection
    y ~ norm(max(0, p_{n+1} - q_{n+1}))  after a rejection,   y ~ p_{k+1}  after k acceptances
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..attention import naive
from ..sampling import sample_from

# The oracle's "temperature" setup warps both sides at this temperature; the two pipeline bugs
# below undo it on one side, which is what an engine that forgets the warping there computes.
SETUP_TEMPERATURE = 0.6


def _textbook(tokens: Tensor, q: Tensor, p: Tensor, u: Tensor, *, count=None, residual=None, bonus_row=None,
              next_uniform=None) -> tuple[Tensor, Tensor]:
    """The correct step with one part replaceable; q [B, k, V], p [B, k+1, V], u [B, k+1] (float64)."""
    batch, k = tokens.shape
    p_x = p[:, :k].gather(-1, tokens[..., None]).squeeze(-1)  # (B, k)
    q_x = q.gather(-1, tokens[..., None]).squeeze(-1)  # (B, k)
    accepted = u[:, :k] * q_x < p_x
    n = count(accepted) if count else accepted.long().cumprod(-1).sum(-1)  # (B,)
    rows = torch.arange(batch)
    p_n = p[rows, n] if bonus_row is None else bonus_row(p, n)  # (B, V)
    q_n = torch.cat([q, torch.zeros_like(q[:, :1])], 1)[rows, n]  # zero after k acceptances
    r = (p_n - q_n).clamp_min(0) if residual is None else residual(p_n, q_n)
    r = torch.where(r.sum(-1, keepdim=True) > 0, r, p_n)
    u_next = u[:, k] if next_uniform is None else next_uniform(u, n)
    return n, sample_from(r, u_next)


def _inputs(draft_probs, target_probs, generator, k):
    u = torch.rand(draft_probs.shape[0], k + 1, generator=generator, dtype=torch.float64)
    return draft_probs.double(), target_probs.double(), u


def textbook(draft_tokens, draft_probs, target_probs, *, generator=None):
    """The textbook step with nothing replaced: exact, and not a bug (so not in ``SAMPLERS``). It is an
    exact sampler written apart from ``rejection_sample`` (it draws its uniforms in its own order); the
    course's chapter 04 check uses it so that an answer must test a sampler, not recognise one."""
    return _textbook(draft_tokens, *_inputs(draft_probs, target_probs, generator, draft_tokens.shape[1]))


def residual_not_normalised(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Wrong residual: the inverse CDF of max(0, p - q) is read without dividing by its total, so a
    uniform beyond the residual's mass falls on the last token (the class of vLLM PR #2336, whose
    residual was clamped rather than renormalised)."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    n, _ = _textbook(draft_tokens, q, p, u)
    rows, k = torch.arange(len(n)), draft_tokens.shape[1]
    q_n = torch.cat([q, torch.zeros_like(q[:, :1])], 1)[rows, n]
    r = (p[rows, n] - q_n).clamp_min(0)
    nxt = torch.searchsorted(r.cumsum(-1), u[:, k:].contiguous(), right=True).squeeze(-1)
    return n, nxt.clamp(max=r.shape[-1] - 1)


def residual_is_p(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Wrong residual: after a rejection the next token is drawn from p instead of
    norm(max(0, p - q)), which double-counts the mass the draft already had a chance to take."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    return _textbook(draft_tokens, q, p, u, residual=lambda p_n, q_n: p_n)


def residual_softmax(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Wrong residual: max(0, p - q) normalised with a softmax instead of dividing by its sum
    (transformers before PR #28508)."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    def softmax_residual(p_n, q_n):  # after k acceptances (q_n = 0) the bonus still comes from p, as there
        rejected = q_n.sum(-1, keepdim=True) > 0
        return torch.where(rejected, torch.softmax((p_n - q_n).clamp_min(0), -1), p_n)

    return _textbook(draft_tokens, q, p, u, residual=softmax_residual)


def bonus_off_by_one(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Bonus token off by one: after k acceptances the bonus is drawn from the target's
    distribution at position k (the last draft's) instead of k + 1."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    k = draft_tokens.shape[1]
    return _textbook(draft_tokens, q, p, u, bonus_row=lambda p, n: p[torch.arange(len(n)), n.clamp(max=k - 1)])


def counts_after_rejection(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Acceptances counted after the first rejection: the number accepted is the count of accepted
    positions, not the length of the accepted prefix (vLLM issues #2658 and #10604)."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    return _textbook(draft_tokens, q, p, u, count=lambda accepted: accepted.long().sum(-1))


def wrong_position_row(draft_tokens, draft_probs, target_probs, *, generator=None):
    """q not the distribution actually sampled from: draft position i is compared with the draft's
    row for position i - 1 (a shifted index, as when the draft's logits are sliced one off; position
    1 gets the last position's row, ``torch.roll`` wraps around)."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    return _textbook(draft_tokens, torch.roll(q, 1, dims=1), p, u)


def single_target_sample(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Verification by matching, then a fresh draw: draw one token from p at each position and accept
    the draft iff it is equal; at the first mismatch, discard that target draw and draw the next token
    afresh from p. (Emitting the mismatching target draw itself would be exact; the fresh draw from p
    over-weights the draft's token, which is no longer excluded.)"""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    k = draft_tokens.shape[1]
    target_draw = torch.stack([sample_from(p[:, i], u[:, i]) for i in range(k)], 1)
    n = (target_draw == draft_tokens).long().cumprod(-1).sum(-1)
    return n, sample_from(p[torch.arange(len(n)), n], torch.rand(len(n), generator=generator, dtype=torch.float64))


def q_from_raw_logits(draft_tokens, draft_probs, target_probs, *, generator=None):
    """q not the distribution actually sampled from: the draft sampled from its warped distribution,
    but the ratio p/q uses the softmax of its raw logits (transformers issues #47932 and #32867).
    Here: the draft side un-warped from the oracle's setup temperature, q' proportional to q^T."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    raw = q ** SETUP_TEMPERATURE
    return _textbook(draft_tokens, raw / raw.sum(-1, keepdim=True), p, u)


def warping_on_draft_only(draft_tokens, draft_probs, target_probs, *, generator=None):
    """Warping applied to only one side: the draft's distributions are warped, the target's are not,
    so the output follows the unwarped target (transformers PR #40976). Here: the target side
    un-warped from the oracle's setup temperature, p' proportional to p^T."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    raw = p ** SETUP_TEMPERATURE
    return _textbook(draft_tokens, q, raw / raw.sum(-1, keepdim=True), u)


def reused_uniform(draft_tokens, draft_probs, target_probs, *, generator=None):
    """The uniform that rejected x_{n+1} is reused to draw the replacement. Given a rejection it is
    no longer uniform (it lies above p/q), so the residual draw is biased (a downstream port of
    vLLM's sampler did this)."""
    q, p, u = _inputs(draft_probs, target_probs, generator, draft_tokens.shape[1])
    k = draft_tokens.shape[1]
    return _textbook(draft_tokens, q, p, u, next_uniform=lambda u, n: u[torch.arange(len(n)), n.clamp(max=k)])


SAMPLERS = {f.__name__: f for f in (
    residual_not_normalised, residual_is_p, residual_softmax, bonus_off_by_one, counts_after_rejection,
    wrong_position_row, single_target_sample, q_from_raw_logits, warping_on_draft_only, reused_uniform)}


# --- bugs only a given-uniforms probe sees --------------------------------------------------------------

def accepts_at_u_zero(draft_tokens, draft_probs, target_probs, u_accept, u_next):
    """Acceptance tested as u <= p/q instead of u < p/q: with u drawn from [0, 1), u == 0 accepts a
    draft token the target gives probability 0 (about 2^-24 per float32 draw: invisible to any
    sampling test). transformers' ``_speculative_sampling`` tested ``r_i <= probability_ratio`` up to 5.24; 5.25 tests
    ``r_i < probability_ratio``."""
    p, q = target_probs.double(), draft_probs.double()
    k = draft_tokens.shape[1]
    p_x = p[:, :k].gather(-1, draft_tokens[..., None]).squeeze(-1)
    q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
    u = torch.cat([u_accept.double(), u_next.double()[:, None]], 1)
    n = (u[:, :k] * q_x <= p_x).long().cumprod(-1).sum(-1)
    return _textbook(draft_tokens, q, p, u, count=lambda accepted: n)


UNIFORM_SAMPLERS = {"accepts_at_u_zero": accepts_at_u_zero}


# --- broken attention backends ---------------------------------------------------------------------------

def _per_sequence(q, k_cache, v_cache, q_lens, kv_lens, scale):
    """For each sequence: its rows of q and out (a slice), its scores [H, n_q, n_kv] and values [H, n_kv, D] in
    float32 (GQA's kv heads repeated), and each query's absolute position [n_q, 1]."""
    group = q.shape[1] // k_cache.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    start = 0
    for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        keys = k_cache[b, :, :n_kv].repeat_interleave(group, 0).float()  # (H, n_kv, D)
        values = v_cache[b, :, :n_kv].repeat_interleave(group, 0).float()
        scores = torch.einsum("thd,hsd->hts", q[start:start + n_q].float(), keys) * scale
        yield slice(start, start + n_q), scores, values, torch.arange(n_kv - n_q, n_kv)[:, None]
        start += n_q


def causal_off_by_one(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """Causal mask off by one: each query also sees the key one position after its own."""
    out = torch.empty_like(q)
    for rows, scores, values, position in _per_sequence(q, k_cache, v_cache, q_lens, kv_lens, scale):
        scores = scores.masked_fill(torch.arange(scores.shape[-1]) > position + 1, float("-inf"))  # + 1: the bug
        out[rows] = torch.einsum("hts,hsd->thd", torch.softmax(scores, -1), values).to(q.dtype)
    return out


def stale_slot_leak(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """Stale cache slots leak in: keys are padded to the batch maximum and the padding is masked by
    multiplying the scores by 0 instead of setting them to -inf, so a NaN/inf left in a slot at or
    beyond kv_lens reaches the output (0 * NaN is NaN). The causal mask itself is right."""
    group = q.shape[1] // k_cache.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    longest, start = int(kv_lens.max()), 0
    for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        keys = k_cache[b, :, :longest].repeat_interleave(group, 0).float()  # (H, longest, D): padded
        values = v_cache[b, :, :longest].repeat_interleave(group, 0).float()
        scores = torch.einsum("thd,hsd->hts", q[start:start + n_q].float(), keys) * scale
        key = torch.arange(longest)[None, :]
        position = torch.arange(n_kv - n_q, n_kv)[:, None]  # (n_q, 1)
        scores = scores.masked_fill((key > position) & (key < n_kv), float("-inf"))  # causal: right
        scores = scores * (key < n_kv)  # padding: the bug, 0 instead of -inf
        weights = torch.softmax(scores, -1)
        out[start:start + n_q] = torch.einsum("hts,hsd->thd", weights, values).to(q.dtype)
        start += n_q
    return out


def idle_ignores_kv_lens(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """Idle sequences dropped from q_lens but not from kv_lens: every sequence after an idle one
    (q_len 0) reads the key length of the sequence before it."""
    keep = q_lens > 0
    wrong_kv = torch.maximum(kv_lens[:int(keep.sum())], q_lens[keep]).clamp(max=k_cache.shape[2])  # the bug
    return naive(q, k_cache[keep], v_cache[keep], q_lens[keep], wrong_kv, scale=scale)


def eight_sequence_table(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """Per-sequence metadata in a fixed table of 8 slots: sequences past the 8th get no output (zeros)."""
    out = naive(q, k_cache, v_cache, q_lens, kv_lens, scale=scale)
    return out * (torch.arange(len(out)) < int(q_lens[:8].sum()))[:, None, None]  # rows of sequences 9.. zeroed


def split_kv_without_rescale(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """Flash-decoding: a single-token decode splits its keys into chunks of 512, attends within each
    chunk, then averages the chunks' outputs instead of weighting each by its share of the softmax
    mass (the bug). Right wherever a cache fits in one chunk, and for every step of more than one token."""
    chunk, out, start = 512, naive(q, k_cache, v_cache, q_lens, kv_lens, scale=scale), 0
    for b, (n_q, n_kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        if n_q == 1 and n_kv > chunk:
            parts = [naive(q[start:start + 1], k_cache[b:b + 1, :, s:s + chunk], v_cache[b:b + 1, :, s:s + chunk],
                           q_lens[b:b + 1], torch.tensor([min(chunk, n_kv - s)]), scale=scale)
                     for s in range(0, n_kv, chunk)]
            out[start] = torch.stack(parts).mean(0)[0]
        start += n_q
    return out


def softmax_without_max(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):
    """The softmax as exp(s) / sum(exp(s)), exp taken in the inputs' dtype with no maximum subtracted (the bug):
    right on small scores, inf / inf = NaN once exp overflows (past 11.09 in float16, 88.7 in float32 and
    bfloat16), which only ``check_attention``'s large-score cases reach."""
    out = torch.empty_like(q)
    for rows, scores, values, position in _per_sequence(q, k_cache, v_cache, q_lens, kv_lens, scale):
        weights = torch.exp(scores.to(q.dtype)).float()  # no maximum taken out: the bug
        weights = weights.masked_fill(torch.arange(scores.shape[-1]) > position, 0)  # causal: right
        out[rows] = torch.einsum("hts,hsd->thd", weights / weights.sum(-1, keepdim=True), values).to(q.dtype)
    return out


ATTENTION = {f.__name__: f for f in (causal_off_by_one, stale_slot_leak, idle_ignores_kv_lens, eight_sequence_table,
                                     split_kv_without_rescale, softmax_without_max)}
