"""Batched speculative decoding (BASS): draft -> verify -> accept -> roll back, over ragged caches.

Every sequence of the batch accepts its own number of draft tokens at each step, so after one
step the KV caches of both models have different lengths: that raggedness is what the
attention backends handle. One step, for the active sequences (``step`` below, on one screen):

    1. draft     the draft model catches up on the tokens it has not seen (usually 1 or 2),
                 then proposes k_b tokens, sampling each from its warped distribution q_i
    2. verify    one target forward over [last emitted token, x_1..x_k]  ->  p_1..p_{k+1}
    3. accept    the rejection rule (accept_and_resample, the core of rejection_sample): keep x_1..x_n,
                 then y from norm(max(0, p - q)) or p_{k+1}
    4. emit      append x_1..x_n, y to the sequence; cut at EOS
    5. roll back truncate both caches to what the emitted sequence confirms

State between steps is a few tensors: ``history`` long [B, C] (prompt and emitted tokens,
``seq_lens`` [B] of them valid, the first ``prompt_lens`` [B] the prompt's), the two caches, and
``active`` bool [B]. Everything else is derived. Cache invariants between steps, for a
sequence with ``seq_lens[b] = m`` tokens:

    target cache: history[b, :m - 1]      (the last token is fed at the next verify)
    draft cache:  history[b, :d], d < m   (it catches up on history[b, d:m] before drafting)

so the roll-back is two lines: the target keeps m - 1 tokens, the draft keeps what it was fed
that the new history confirms, min(its length, m - 1).

Finished sequences stay in the batch, idle (q_len 0): they add no packed tokens, so no
projection or MLP work, their attention programs exit at once, and batch indices stay stable
for the per-sequence random streams and the stats. Sequences never run past their budget:
near the end a sequence drafts at most ``max_new_tokens - emitted - 1`` tokens (0 means a
plain target step), so no cache or position ever exceeds ``prompt + max_new_tokens``.

Seams. The four phases are plain functions gathered in ``Phases``; ``speculative_generate``
takes ``phases=`` so that a test can swap one for a deliberately broken twin (the planted-bug
tests do) without patching private names, and ``step=`` so that the course's learner can
assemble a step from the phases and run it in the real loop. Greedy decoding runs
``GREEDY_PHASES`` by default: with one-hot p and q the rejection rule reduces to comparing tokens,
so those phases pass tokens instead of distributions (same output, less work per step).

Papers: speculative sampling — Leviathan et al. 2023, Chen et al. 2023; batching with ragged
caches and the dynamic draft length — Qian et al. 2024 (BASS), Algorithm 1.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from .draft_length import make_policy
from .generate import IDLE, GenerationResult, GenerationStats, check_eos, check_request, last_logits
from .rejection import accept_and_resample
from .sampling import SamplingParams, SeedStreams, greedy_tokens, is_int, probs, sample


def draft_calls(draft, cache, history: Tensor, seq_lens: Tensor, draft_lens: Tensor, drafts: Tensor, attention):
    """The draft's calls of one step: yields (i, rows, logits [R, V]) for i = 0..kmax-1, where rows are
    the sequences still drafting at position i; the caller writes their token at ``drafts[rows, i]``
    before asking for the next call, which feeds it.

    The first call feeds each drafting sequence the history the draft has not seen,
    history[b, cache.lengths[b]:seq_lens[b]]; each later call one token, the previous draft.
    """
    cols = torch.arange(history.shape[1])
    for i in range(drafts.shape[1]):
        drafting = draft_lens > i  # (B,) sequences still drafting
        rows = drafting.nonzero().flatten()
        if i == 0:  # catch up: the unseen history of each drafting sequence, packed
            unseen = (cols >= cache.lengths.cpu()[:, None]) & (cols < seq_lens[:, None]) & drafting[:, None]
            tokens, q_lens = history[unseen], unseen.sum(1)
        else:
            tokens, q_lens = drafts[rows, i - 1], drafting.long()
        logits = draft.forward(tokens, q_lens, cache, attention=attention)  # (N, V)
        if len(logits) != len(rows):  # else every drafting sequence was fed one token: logits are its rows already
            logits = last_logits(logits, q_lens[rows].to(logits.device))  # (R, V): non-drafting rows fed nothing
        yield i, rows, logits


def draft_phase(draft, cache, history: Tensor, seq_lens: Tensor, draft_lens: Tensor, sampling: SamplingParams,
                streams: SeedStreams, attention) -> tuple[Tensor, Tensor | None]:
    """Proposes draft_lens[b] tokens for each sequence b (0: none).

    Returns drafts long [B, kmax] (host) and q [B, kmax, V], the distributions they were sampled
    from (zero past draft_lens[b]; None if nobody drafts).
    """
    batch, kmax = len(draft_lens), int(draft_lens.max())
    drafts, q = torch.zeros(batch, kmax, dtype=torch.long), None
    for i, rows, logits in draft_calls(draft, cache, history, seq_lens, draft_lens, drafts, attention):
        x, q_i = sample(logits, sampling, streams, rows)  # (R,), (R, V)
        if q is None:
            q = q_i.new_zeros(batch, kmax, q_i.shape[-1])  # (B, kmax, V)
        drafts[rows, i], q[rows.to(q.device), i] = x.cpu(), q_i
    return drafts, q


def verify_logits(target, cache, history: Tensor, seq_lens: Tensor, drafts: Tensor, draft_lens: Tensor,
                  active: Tensor, attention) -> tuple[Tensor, Tensor]:
    """One target forward over [last token, x_1..x_k] per active sequence.

    Returns the packed logits [N, V] and rows long [B, kmax + 1]: the packed row of each sequence's
    positions 0..k_b (later positions repeat row k_b; idle sequences point at some valid row and are
    never read).
    """
    last = history.gather(1, (seq_lens - 1)[:, None])  # (B, 1) last emitted token
    fed = torch.cat([last, drafts], 1)  # (B, kmax + 1)
    q_lens = torch.where(active, draft_lens + 1, 0)  # (B,)
    offsets = torch.arange(fed.shape[1])
    logits = target.forward(fed[offsets < q_lens[:, None]], q_lens, cache, attention=attention)  # (N, V) packed
    starts = q_lens.cumsum(0) - q_lens  # (B,) where each row starts in the packed logits
    rows = (starts[:, None] + torch.minimum(offsets, q_lens[:, None] - 1)).clamp(min=0)  # (B, kmax + 1)
    return logits, rows.to(logits.device)


def verify_phase(target, cache, history: Tensor, seq_lens: Tensor, drafts: Tensor, draft_lens: Tensor,
                 active: Tensor, sampling: SamplingParams, attention) -> Tensor:
    """Returns p [B, kmax + 1, V]: row b holds p_1..p_{k_b + 1} at positions 0..k_b (later positions
    repeat p_{k_b + 1} and are never read; idle rows are never read either)."""
    logits, rows = verify_logits(target, cache, history, seq_lens, drafts, draft_lens, active, attention)
    return probs(logits, sampling)[rows]  # (B, kmax + 1, V)


def accept_phase(drafts: Tensor, q: Tensor | None, p: Tensor, draft_lens: Tensor, active: Tensor,
                 streams: SeedStreams) -> tuple[Tensor, Tensor]:
    """The batched rejection step; each active sequence draws its uniforms from its own stream.

    Returns num_accepted and next_tokens, long [B] on the host (meaningless for idle rows, which
    draw nothing). Positions past a sequence's own k_b are padding (``draft_lens``): never
    accepted, and with q = 0 there the 'residual' at k_b is max(0, p_{k_b+1} - 0): the bonus
    token, as it should be.
    """
    kmax = drafts.shape[1]
    # Sequence b draws k_b uniforms to accept with, then one for the next token; idle rows draw none.
    ks = torch.where(active, draft_lens, -1)  # (B,)
    u = streams.uniform_ragged(range(len(ks)), (ks + 1).tolist(), kmax + 1)  # (B, kmax + 1)
    u_accept, u_next = u[:, :kmax], u.gather(1, ks.clamp(min=0)[:, None]).squeeze(1)  # (B, kmax), (B,)
    q = q if q is not None else p.new_zeros(len(draft_lens), 0, p.shape[-1])  # nobody drafted: (B, 0, V)
    n, y = accept_and_resample(drafts.to(p.device), q, p, u_accept, u_next, draft_lens)
    return n.cpu(), y.cpu()


def rollback_phase(target_cache, draft_cache, seq_lens: Tensor) -> None:
    """Truncates both caches to what the history of ``seq_lens`` tokens confirms (invariants above)."""
    target_cache.truncate(torch.minimum(target_cache.lengths.cpu(), seq_lens - 1))  # (a no-op copy on the host)
    draft_cache.truncate(torch.minimum(draft_cache.lengths.cpu(), seq_lens - 1))


# Greedy decoding: p and q are one-hot, so the rejection rule needs only tokens. u * q(x) < p(x) holds
# exactly when the draft token x is the target's argmax, and both the residual max(0, p - q) at the first
# mismatch and p_{k+1} after a full acceptance are one-hot at the target's argmax: keep the drafts that
# agree with the target up to the first that does not, then take the target's token. The same tokens as
# the phases above (tested), without building and comparing [B, k, V] one-hot tensors on every step.

def greedy_draft_phase(draft, cache, history: Tensor, seq_lens: Tensor, draft_lens: Tensor,
                       sampling: SamplingParams, streams: SeedStreams, attention) -> tuple[Tensor, None]:
    """``draft_phase`` for greedy decoding: drafts long [B, kmax] (the draft's argmax tokens), and no q."""
    if not sampling.greedy:
        raise ValueError(f"the greedy phases compare argmax tokens: they need temperature 0, got {sampling}")
    drafts = torch.zeros(len(draft_lens), int(draft_lens.max()), dtype=torch.long)
    for i, rows, logits in draft_calls(draft, cache, history, seq_lens, draft_lens, drafts, attention):
        drafts[rows, i] = greedy_tokens(logits).cpu()  # the first index of the maximum, as in ``sample``
    return drafts, None


def greedy_verify_phase(target, cache, history: Tensor, seq_lens: Tensor, drafts: Tensor, draft_lens: Tensor,
                        active: Tensor, sampling: SamplingParams, attention) -> Tensor:
    """``verify_phase`` for greedy decoding: the target's tokens long [B, kmax + 1] (host), laid out as p."""
    logits, rows = verify_logits(target, cache, history, seq_lens, drafts, draft_lens, active, attention)
    return greedy_tokens(logits)[rows].cpu()  # (B, kmax + 1)


def greedy_accept_phase(drafts: Tensor, q: None, p: Tensor, draft_lens: Tensor, active: Tensor,
                        streams: SeedStreams) -> tuple[Tensor, Tensor]:
    """``accept_phase`` for greedy decoding, p the target's tokens [B, kmax + 1]: the drafts that agree with
    them, up to the first that does not (never past draft_lens[b]), then the target's next token."""
    kmax = drafts.shape[1]
    agree = (drafts == p[:, :kmax]) & (torch.arange(kmax) < draft_lens[:, None])  # (B, kmax)
    n = agree.long().cumprod(1).sum(1)  # (B,) length of the agreeing prefix
    return n, p.gather(1, n[:, None]).squeeze(1)


@dataclass(frozen=True)
class Phases:
    """The phases of a step, swappable as a whole for tests (``dataclasses.replace(Phases(), ...)``)."""

    draft: Callable = draft_phase
    verify: Callable = verify_phase
    accept: Callable = accept_phase
    rollback: Callable = rollback_phase


GREEDY_PHASES = Phases(draft=greedy_draft_phase, verify=greedy_verify_phase, accept=greedy_accept_phase)


@dataclass
class LoopState:
    """The loop's state: tensors on the host, plus both models' caches."""

    history: Tensor  # long [B, C]: prompt then emitted tokens
    seq_lens: Tensor  # long [B]: valid tokens in history
    prompt_lens: Tensor  # long [B]
    active: Tensor  # bool [B]
    target_cache: object
    draft_cache: object


def emit(s: LoopState, drafts: Tensor, n: Tensor, y: Tensor, eos_token_id) -> None:
    """Appends x_1..x_n, y to each active sequence's history; a sequence that emits EOS (``eos_token_id``:
    None, or one id or several, as ints or a tensor) keeps it and stops."""
    new = torch.cat([drafts, torch.zeros_like(n)[:, None]], 1).scatter(1, n[:, None], y[:, None])  # (B, kmax + 1)
    offset = torch.arange(new.shape[1])
    kept = (offset <= n[:, None]) & s.active[:, None]  # (B, kmax + 1)
    if eos_token_id is not None:
        eos = torch.isin(new, torch.as_tensor(eos_token_id, device=new.device)) & kept
        kept &= offset <= torch.where(eos.any(1), eos.long().argmax(1), new.shape[1])[:, None]  # through the first EOS
        s.active &= ~eos.any(1)
    rows, cols = kept.nonzero(as_tuple=True)
    s.history[rows, s.seq_lens[rows] + cols] = new[rows, cols]
    s.seq_lens += kept.sum(1)


def step(s: LoopState, target, draft, draft_lens: Tensor, sampling, streams, attention, eos_token_id, phases: Phases,
         timer) -> Tensor:
    """One BASS step for the active sequences (draft_lens [B], 0 for idle ones); returns num_accepted [B]."""
    with timer("draft"):  # 1. the draft proposes x_1..x_k ~ q
        drafts, q = phases.draft(draft, s.draft_cache, s.history, s.seq_lens, draft_lens, sampling, streams, attention)
    with timer("verify"):  # 2. the target scores [last, x_1..x_k] in one call: p_1..p_{k+1}
        p = phases.verify(target, s.target_cache, s.history, s.seq_lens, drafts, draft_lens, s.active, sampling,
                          attention)
    with timer("accept"):  # 3. keep x_1..x_n, with u < min(1, p/q); y ~ norm(max(0, p - q)) or p_{k+1}
        n, y = phases.accept(drafts, q, p, draft_lens, s.active, streams)
    with timer("rollback"):
        emit(s, drafts, n, y, eos_token_id)  # 4. the sequences grow by x_1..x_n, y (cut after EOS)
        phases.rollback(s.target_cache, s.draft_cache, s.seq_lens)  # 5. both caches keep what the history confirms
    return n


class PhaseTimer:
    """``with timer("draft"): ...`` adds the block's wall time to ``stats.time_split``.

    Where CUDA is in use, it waits for the GPU at both ends so that the split is honest.
    """

    def __init__(self, stats: GenerationStats):
        self.stats, self.last = stats, {}  # last: the latest duration of each phase

    @contextmanager
    def __call__(self, phase: str):
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        yield
        if cuda:
            torch.cuda.synchronize()
        self.last[phase] = time.perf_counter() - start
        self.stats.time_split[phase] = self.stats.time_split.get(phase, 0.0) + self.last[phase]


def _briefly(values) -> str:
    """A policy's answer for an error message: short ones whole, long ones by their length and first values."""
    try:
        values = list(values)
    except TypeError:
        return f"{values!r:.60}"
    return repr(values) if len(values) <= 8 else f"{len(values)} values: [{', '.join(map(repr, values[:8]))}, ...]"


def _prefill(target, draft, prompts, capacity, attention) -> LoopState:
    """Both models read every prompt but its last token (the first verify feeds that one)."""
    batch = len(prompts)
    history = torch.zeros(batch, capacity, dtype=torch.long)
    for b, prompt in enumerate(prompts):
        history[b, :len(prompt)] = torch.tensor(prompt)
    prompt_lens = torch.tensor([len(p) for p in prompts])
    s = LoopState(history, prompt_lens.clone(), prompt_lens, torch.ones(batch, dtype=torch.bool),
                 target.init_cache(batch, capacity), draft.init_cache(batch, capacity))
    head = torch.arange(capacity) < (prompt_lens - 1)[:, None]  # (B, C): all but the last prompt token
    if head.any():
        for model, cache in ((target, s.target_cache), (draft, s.draft_cache)):
            model.forward(history[head], head.sum(1), cache, attention=attention)
    return s


@torch.inference_mode()  # as ``generate``: no autograd bookkeeping at all; the result holds lists
def speculative_generate(target, draft, prompts: list[list[int]], max_new_tokens: int, *,
                         sampling: SamplingParams = SamplingParams(), draft_length=4, seed=None,
                         attention: str | None = None, eos_token_id: int | Sequence[int] | None = None,
                         phases: Phases | None = None, step: Callable = step) -> GenerationResult:
    """Batched speculative sampling: tokens distributed exactly as ``generate(target, ...)``.

    draft_length: an int (fixed), "dynamic" (BASS Algorithm 1, one length for the batch),
    "per-sequence" (Algorithm 1 per sequence), "auto" (cost-aware: the k that maximises expected
    tokens per second from the acceptance and call costs seen so far) or a policy object (see
    ``minibass.draft_length``; one object can serve several calls, e.g. a ``CostAwareDraftLength``
    that keeps its timings from call to call).
    seed: as for ``generate`` (one stream per sequence), though the streams are consumed
    differently, so equal seeds do not give equal samples across the two functions. The numbers a
    sequence draws depend on its draft lengths: a per-prompt seed makes a prompt's output independent
    of the rest of the batch with a fixed length or "per-sequence", not with "dynamic" or "auto",
    whose lengths follow the whole batch. "auto" with measured costs picks lengths from timings, so
    under sampling two runs with the same seed give equally distributed, not always equal, tokens;
    ``CostAwareDraftLength(costs=DraftCosts(...))`` repeats exactly. Greedy decoding is unaffected.
    eos_token_id: None, one token id, or a list of them (any of them ends a sequence).
    attention: a key of ``minibass.BACKENDS``, or None for each model's default for its device.
    phases: the step's phases (tests swap one for a planted bug); leave the default, None:
    ``GREEDY_PHASES`` for greedy decoding (tokens compared, no one-hot distributions built; the same
    output), ``Phases()`` otherwise.
    step: the function that runs one step from the phases (the course has the learner assemble
    one); leave the default.
    """
    prompts = check_request([target, draft], prompts, max_new_tokens, sampling, attention)
    eos = check_eos(eos_token_id, target.vocab_size)
    eos_token_id = None if eos is None else torch.tensor(eos)  # built once; emit compares with it every step
    policy = make_policy(draft_length)
    if hasattr(policy, "start"):  # a policy object may serve several calls: its sequences are new ones
        policy.start(len(prompts))
    if phases is None:
        phases = GREEDY_PHASES if sampling.greedy else Phases()
    batch = len(prompts)
    streams = SeedStreams(seed, batch)
    stats = GenerationStats(speculative=True)
    if max_new_tokens == 0:
        return GenerationResult([[] for _ in range(batch)], stats)
    started = time.perf_counter()
    s = _prefill(target, draft, prompts, max(len(p) for p in prompts) + max_new_tokens, attention)
    stats.target_calls = stats.draft_calls = int(bool(s.target_cache.lengths.any()))  # the prefill, if any
    timer = PhaseTimer(stats)

    while s.active.any():
        step_started = time.perf_counter()
        active = s.active.nonzero().flatten().tolist()
        asked = policy.lengths(active)
        if len(asked) != len(active) or any(not is_int(k) or k < 1 for k in asked):
            raise ValueError(f"draft length policy must return one int >= 1 per active sequence ({len(active)}), "
                             f"got {_briefly(asked)}")
        asked = [int(k) for k in asked]  # NumPy integers (np.uint64 cannot go into a torch tensor) become ints
        # Never draft past the budget: at most (max_new_tokens - emitted - 1) drafts, + 1 token from the target.
        budget = (max_new_tokens - 1 - (s.seq_lens - s.prompt_lens)).tolist()
        lengths = [0] * batch  # idle sequences draft nothing
        for b, k in zip(active, asked):
            lengths[b] = min(k, budget[b])
        draft_lens = torch.tensor(lengths)
        n = step(s, target, draft, draft_lens, sampling, streams, attention, eos_token_id, phases, timer)
        s.active &= (s.seq_lens - s.prompt_lens) < max_new_tokens
        _record(stats, policy, active, draft_lens, n, timer.last["draft"], time.perf_counter() - step_started)

    out = [s.history[b, s.prompt_lens[b]:s.seq_lens[b]].tolist() for b in range(batch)]
    stats.new_tokens = sum(len(o) for o in out)
    stats.wall_time = time.perf_counter() - started
    return GenerationResult(out, stats)


def _record(stats: GenerationStats, policy, active: list[int], draft_lens: Tensor, n: Tensor, draft_seconds: float,
            step_seconds: float):
    """Bookkeeping after a step: counts for the stats, and what the draft-length policy hears."""
    ks, accepted = draft_lens[active].tolist(), n[active].tolist()
    stats.steps += 1
    stats.target_calls += 1
    stats.draft_calls += max(ks)
    stats.draft_lengths.append(max(ks))
    stats.proposed_tokens += sum(ks)
    stats.accepted_tokens += sum(accepted)
    stats.sequence_steps += len(active)
    row, proposed = [IDLE] * len(n), [IDLE] * len(n)  # idle sequences are marked as such
    for b, k_b, accepted_b in zip(active, ks, accepted):
        row[b], proposed[b] = accepted_b, k_b
    stats.accepted.append(row)
    stats.proposed.append(proposed)
    drafted = [i for i, k in enumerate(ks) if k > 0]  # sequences that proposed nothing do not take part
    if drafted:
        policy.update([active[i] for i in drafted], [ks[i] for i in drafted], [accepted[i] for i in drafted])
    if hasattr(policy, "observe_costs"):  # a cost-aware policy hears what the draft calls and the rest of the step took
        policy.observe_costs(max(ks), draft_seconds, step_seconds - draft_seconds)
