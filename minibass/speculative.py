"""Batched speculative decoding (BASS): draft -> verify -> accept -> roll back, over ragged caches.

Every sequence of the batch accepts its own number of draft tokens at each step, so after one
step the KV caches of both models have different lengths: that raggedness is what the
attention backends handle. The loop, per step, for the active sequences:

    1. draft     the draft model catches up on the tokens it has not seen (1 or 2 per sequence),
                 then proposes k tokens, sampling each from its warped distribution q_i
    2. verify    one target forward over [last emitted token, x_1..x_k]  ->  p_1..p_{k+1}
    3. accept    rejection_sample: keep x_1..x_n, then y from norm(max(0, p - q)) or p_{k+1}
    4. roll back truncate both caches to exactly what was accepted
    5. finish    cut at EOS / max_new_tokens (the kept tokens' distribution is unchanged)

Cache invariants between steps, for an active sequence with emitted tokens e_1..e_m
(prompt included):
    target cache: e_1..e_{m-1}        (the last token is fed at the next verify)
    draft cache:  all but ``pending`` (the 1 or 2 tokens it has not seen yet)

Finished sequences stay in the batch, idle (q_len 0): they add no packed tokens, so no
projection or MLP work, their attention programs exit at once, and batch indices stay stable
for the per-sequence random streams and the stats. Sequences never run past their budget:
near the end a sequence drafts at most ``max_new_tokens - emitted - 1`` tokens (0 means a
plain target step), so no cache or position ever exceeds ``prompt + max_new_tokens``.

Papers: speculative sampling — Leviathan et al. 2023, Chen et al. 2023; batching with ragged
caches and the dynamic draft length — Qian et al. 2024 (BASS), Algorithm 1.
"""

from __future__ import annotations

import time

import torch

from .draft_length import make_policy
from .generate import IDLE, GenerationResult, GenerationStats, check_request, finished_after, last_logits
from .rejection import accept_and_resample
from .sampling import SamplingParams, SeedStreams, probs, sample_from


class _Clock:
    """Wall time per phase (synchronising the GPU so that the split is honest)."""

    def __init__(self, stats: GenerationStats, device: torch.device):
        self.stats, self.cuda = stats, device.type == "cuda"
        self.phase, self.start = None, 0.0

    def __call__(self, phase: str | None):
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        if self.phase:
            self.stats.time_split[self.phase] = self.stats.time_split.get(self.phase, 0.0) + now - self.start
        self.phase, self.start = phase, now


def _forward(model, batch: int, per_seq: dict[int, list[int]], cache, attention: str):
    """Feeds per_seq[b] new tokens to sequence b (others idle); returns logits [N, V] and q_lens."""
    q_lens = torch.zeros(batch, dtype=torch.long)
    for b, toks in per_seq.items():
        q_lens[b] = len(toks)
    tokens = torch.tensor([t for b in sorted(per_seq) for t in per_seq[b]], dtype=torch.long)
    logits = model.forward(tokens, q_lens.to(cache.lengths.device), cache, attention=attention)
    return logits, q_lens


def _prefill(target, draft, prompts, capacity, attention, stats):
    """Both models read every prompt but its last token (the first verify feeds that one)."""
    batch = len(prompts)
    caches = target.init_cache(batch, capacity), draft.init_cache(batch, capacity)
    head = {b: p[:-1] for b, p in enumerate(prompts) if len(p) > 1}
    if head:
        for model, cache in zip((target, draft), caches):
            _forward(model, batch, head, cache, attention)
        stats.target_calls += 1
        stats.draft_calls += 1
    return caches


def _draft(draft, cache, pending, ks, streams, sampling, attention, stats):
    """Proposes ks[b] tokens for each sequence; returns tokens {b: [x_1..x_k]} and q {b: [k, V]}."""
    batch = cache.lengths.shape[0]
    tokens = {b: [] for b in ks}
    dists = {b: [] for b in ks}
    for i in range(max(ks.values(), default=0)):
        feed = {b: (pending[b] if i == 0 else [tokens[b][-1]]) for b, k in ks.items() if k > i}
        order = sorted(feed)
        logits, q_lens = _forward(draft, batch, feed, cache, attention)
        stats.draft_calls += 1
        q = probs(last_logits(logits, q_lens[order].to(logits.device)), sampling)  # (B_drafting, V)
        x = sample_from(q, streams.uniform(order)[:, 0].to(q.device)).tolist()
        for j, b in enumerate(order):
            tokens[b].append(x[j])
            dists[b].append(q[j])
    return tokens, dists


def _verify(target, cache, last_token, drafts, sampling, attention, stats):
    """One target forward over [last, x_1..x_k] per sequence; returns p {b: [k+1, V]}."""
    batch = cache.lengths.shape[0]
    feed = {b: [last_token[b]] + xs for b, xs in drafts.items()}
    logits, _ = _forward(target, batch, feed, cache, attention)
    stats.target_calls += 1
    order = sorted(feed)
    p = probs(logits, sampling).split([len(feed[b]) for b in order])  # packed (N, V) -> per sequence
    return dict(zip(order, p))


def _accept(drafts, q, p, streams, vocab):
    """Batched rejection step over sequences with different draft lengths (padded to the longest).

    Positions past a sequence's own k_b are padding (``draft_lens``): never accepted, and with
    q = 0 there the 'residual' at k_b is max(0, p_{k_b+1} - 0): the bonus token, as it should be.
    """
    order = sorted(drafts)
    kmax = max(len(drafts[b]) for b in order)
    n_rows = len(order)
    ref = p[order[0]]
    draft_tokens = torch.zeros(n_rows, kmax, dtype=torch.long, device=ref.device)
    draft_probs = torch.zeros(n_rows, kmax, vocab, dtype=ref.dtype, device=ref.device)
    target_probs = torch.zeros(n_rows, kmax + 1, vocab, dtype=ref.dtype, device=ref.device)
    u_accept = torch.zeros(n_rows, kmax, dtype=torch.float64)
    u_next = torch.empty(n_rows, dtype=torch.float64)
    draft_lens = torch.tensor([len(drafts[b]) for b in order])
    for j, b in enumerate(order):
        k = len(drafts[b])
        if k:
            draft_tokens[j, :k] = torch.tensor(drafts[b])
            draft_probs[j, :k] = torch.stack(q[b])
        target_probs[j, :k + 1] = p[b]
        u = streams.uniform([b], n=k + 1)[0]
        u_accept[j, :k], u_next[j] = u[:k], u[k]
    n, y = accept_and_resample(draft_tokens, draft_probs, target_probs, u_accept, u_next, draft_lens)
    return dict(zip(order, n.tolist())), dict(zip(order, y.tolist()))


def _kept_lengths(target_len: int, draft_len: int, n: int, k: int) -> tuple[int, int]:
    """Cache lengths after a step that accepted n of k drafts (roll back the rejected ones).

    The target was fed [last, x_1..x_k] and keeps [last, x_1..x_n]. The draft was fed its
    pending tokens and x_1..x_{k-1} (x_k is never fed) and keeps its pending tokens and
    x_1..x_min(n, k-1). A sequence that drafted nothing (k = 0) fed the draft nothing.
    """
    return target_len - (k - n), draft_len - ((k - 1) - min(n, k - 1) if k else 0)


def _unseen_by_draft(pending: list[int], drafted: list[int], n: int, y: int) -> list[int]:
    """The tokens the draft must catch up on before it drafts again.

    After full acceptance: x_k (never fed) and the bonus token y. After a rejection: the
    resampled token y. If the sequence drafted nothing this step, its pending tokens stay too.
    """
    if not drafted:
        return pending + [y]
    return ([drafted[-1]] if n == len(drafted) else []) + [y]


@torch.no_grad()
def speculative_generate(target, draft, prompts: list[list[int]], max_new_tokens: int, *,
                         sampling: SamplingParams = SamplingParams(), draft_length=4, seed=None,
                         attention: str = "ragged", eos_token_id: int | None = None) -> GenerationResult:
    """Batched speculative sampling: tokens distributed exactly as ``generate(target, ...)``.

    draft_length: an int (fixed), "dynamic" (BASS Algorithm 1, one length for the batch),
    "per-sequence" (Algorithm 1 per sequence) or a policy object (see ``minibass.draft_length``).
    seed: as for ``generate`` (one stream per sequence), though the streams are consumed
    differently, so equal seeds do not give equal samples across the two functions.
    """
    check_request([target, draft], prompts, max_new_tokens, sampling)
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target and draft must share a vocabulary: vocab_size {target.vocab_size} "
                         f"vs {draft.vocab_size}")
    policy = make_policy(draft_length)
    batch = len(prompts)
    streams = SeedStreams(seed, batch)
    stats = GenerationStats(speculative=True)
    out: list[list[int]] = [[] for _ in range(batch)]
    if max_new_tokens == 0:
        return GenerationResult(out, stats)
    started = time.perf_counter()
    capacity = max(len(p) for p in prompts) + max_new_tokens
    target_cache, draft_cache = _prefill(target, draft, prompts, capacity, attention, stats)
    clock = _Clock(stats, target_cache.lengths.device)
    last = {b: p[-1] for b, p in enumerate(prompts)}  # last emitted token, not yet in the target cache
    pending = {b: [p[-1]] for b, p in enumerate(prompts)}  # tokens the draft has not seen yet
    active = list(range(batch))

    while active:
        asked = policy.lengths(active)
        if len(asked) != len(active) or any(not isinstance(k, int) or k < 1 for k in asked):
            raise ValueError(f"draft length policy must return one int >= 1 per active sequence, got {asked!r}")
        # Never draft past the budget: at most (max_new_tokens - emitted - 1) drafts, + 1 token from the target.
        ks = {b: min(k, max_new_tokens - len(out[b]) - 1) for b, k in zip(active, asked)}
        stats.draft_lengths.append(max(ks.values()))

        clock("draft")
        drafts, q = _draft(draft, draft_cache, pending, ks, streams, sampling, attention, stats)
        clock("verify")
        p = _verify(target, target_cache, last, drafts, sampling, attention, stats)
        clock("accept")
        n_acc, y = _accept(drafts, q, p, streams, target.vocab_size)
        clock("rollback")

        target_keep, draft_keep = target_cache.lengths.clone(), draft_cache.lengths.clone()
        for b in active:
            target_keep[b], draft_keep[b] = _kept_lengths(int(target_keep[b]), int(draft_keep[b]), n_acc[b], ks[b])
            pending[b] = _unseen_by_draft(pending[b], drafts[b], n_acc[b], y[b])
            last[b] = y[b]
            out[b].extend(drafts[b][:n_acc[b]] + [y[b]])
        target_cache.truncate(target_keep)
        draft_cache.truncate(draft_keep)
        clock(None)

        stats.steps += 1
        stats.proposed_tokens += sum(ks.values())
        stats.accepted_tokens += sum(n_acc.values())
        stats.sequence_steps += len(active)
        stats.accepted.append([n_acc[b] if b in n_acc else IDLE for b in range(batch)])
        policy.update(active, [ks[b] for b in active], [n_acc[b] for b in active])

        for b in active:  # cut at EOS and at the budget
            if eos_token_id is not None and eos_token_id in out[b]:
                out[b] = out[b][:out[b].index(eos_token_id) + 1]
            out[b] = out[b][:max_new_tokens]
        active = [b for b in active if not finished_after(out[b], max_new_tokens, eos_token_id)]

    stats.new_tokens = sum(len(o) for o in out)
    stats.wall_time = time.perf_counter() - started
    return GenerationResult(out, stats)
