"""Plain batched autoregressive decoding over ragged prompts — the baseline BASS speeds up.

    prefill  all prompts in one forward step, packed without padding
    decode   one token per active sequence per step; finished sequences go idle (q_len 0)

The decoders use only the ``CausalLM`` protocol: ``vocab_size``, optional ``max_seq_len``,
``init_cache(batch, capacity)`` and ``forward(tokens, q_lens, cache, attention=...)``.

``attention=None`` (the default) lets the model pick: minibass's ``Decoder`` takes
``minibass.attention.default_backend(device)`` — "ragged" on CUDA when Triton imports,
"padded" on a CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch
from torch import Tensor

from .attention import resolve_backend
from .sampling import SamplingParams, SeedStreams, is_int, sample


class Cache(Protocol):
    """A model's KV cache for a batch, as the decoders see it.

    lengths: long [B], the tokens cached per sequence (ragged).
    truncate(lengths): rolls sequences back to these lengths (each <= the current one); this is how
    rejected draft tokens are forgotten.
    """

    lengths: Tensor  # long [B]

    def truncate(self, lengths) -> None: ...


class CausalLM(Protocol):
    """What the decoders need of a model, and nothing else (no ``.device``, ``.dtype`` or ``.config``).

    vocab_size: V. An optional attribute ``max_seq_len`` (int, or None/absent for unbounded) caps
    prompt + new tokens. ``init_cache(batch_size, capacity)`` returns an empty ``Cache``.
    ``forward(tokens, q_lens, cache, attention=None)``: tokens long [sum(q_lens)], packed, each
    sequence's appended after its cached ones (q_lens long [B], 0 for an idle sequence); returns
    float logits [sum(q_lens), V] and advances ``cache.lengths`` by ``q_lens``. minibass's
    ``Decoder`` and the lookup-table ``TableLM`` both meet it.
    """

    vocab_size: int

    def init_cache(self, batch_size: int, capacity: int) -> Cache: ...

    def forward(self, tokens: Tensor, q_lens: Tensor, cache: Cache, *, attention: str | None = None) -> Tensor: ...


IDLE = -1  # marks a sequence that did no work in a step, in ``GenerationStats.accepted``


@dataclass
class GenerationStats:
    """What happened during one call of ``generate`` or ``speculative_generate``.

    steps: rounds that emitted tokens (for plain decoding one token per active sequence each).
    target_calls, draft_calls: forward calls of each model, the prefill (which ``speculative_generate`` skips
    when every prompt is one token) and the draft's catch-up included.
    draft_lengths: the draft length used at each step (the most any sequence drafted).
    accepted: ``[step][sequence]``, the draft tokens each sequence accepted, ``IDLE`` (-1) where a
    sequence had already finished (``max_new_tokens`` or EOS); 0 in a step where its budget left room
    for the target's token only (``proposed`` is 0 there too).
    proposed: ``[step][sequence]``, the draft tokens each sequence proposed (its own length under
    "per-sequence"; 0 where its budget left room for the target's token only), ``IDLE`` where idle.
    proposed_tokens, accepted_tokens: draft tokens proposed and accepted, over active sequences,
    counted before cutting at ``max_new_tokens`` or EOS; sequence_steps: (sequence, step) pairs
    with the sequence active. new_tokens: tokens returned, all sequences together.
    wall_time: seconds; time_split: seconds per phase of a speculative step ("draft", "verify",
    "accept", "rollback"). acceptance_rate, mean_accepted, tokens_per_target_call and
    tokens_per_second are derived from these. Plain ``generate`` drafts nothing: its draft_calls,
    draft_lengths, accepted, proposed and the token counts of drafts stay empty or 0, and time_split {}.
    """

    steps: int = 0  # rounds that emitted tokens (one token per sequence each, for plain decoding)
    target_calls: int = 0  # forward calls of the target (prefill included)
    draft_calls: int = 0  # forward calls of the draft (prefill and catch-up included)
    draft_lengths: list[int] = field(default_factory=list)  # the draft length used at each step
    accepted: list[list[int]] = field(default_factory=list)  # [step][sequence], IDLE where idle
    proposed: list[list[int]] = field(default_factory=list)  # [step][sequence], draft tokens proposed, IDLE where idle
    proposed_tokens: int = 0
    accepted_tokens: int = 0
    sequence_steps: int = 0  # (sequence, step) pairs in which a sequence was active
    new_tokens: int = 0  # tokens returned, all sequences together
    wall_time: float = 0.0  # seconds
    time_split: dict[str, float] = field(default_factory=dict)  # seconds per phase
    speculative: bool = False

    @property
    def acceptance_rate(self) -> float | None:
        """Draft tokens accepted / proposed over active sequences (None for plain decoding, and where no draft
        token was proposed, e.g. with ``max_new_tokens`` 1: 0 of 0 is no rate, and 0.0 would read as a draft
        that never agrees)."""
        if not self.speculative or not self.proposed_tokens:
            return None
        return self.accepted_tokens / self.proposed_tokens

    @property
    def tokens_per_target_call(self) -> float:
        """New tokens, all sequences together, per target forward call (prefill included)."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def mean_accepted(self) -> float | None:
        """Draft tokens accepted per active sequence per step (None for plain decoding)."""
        if not self.speculative:
            return None
        return self.accepted_tokens / self.sequence_steps if self.sequence_steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time if self.wall_time else 0.0


@dataclass
class GenerationResult:
    """tokens: the new tokens of each prompt, in prompt order (``max_new_tokens`` of them, or fewer
    ending with the EOS token when one was hit); stats: a ``GenerationStats``."""

    tokens: list[list[int]]  # new tokens per prompt (EOS included when hit)
    stats: GenerationStats


def check_models(models: Sequence[CausalLM]) -> None:
    """A ValueError unless every model has what ``CausalLM`` asks for (a folder path is not a model)."""
    for model in models:
        if not all(hasattr(model, name) for name in ("vocab_size", "init_cache", "forward")):
            raise ValueError(f"expected a model with vocab_size, init_cache and forward (a CausalLM, e.g. from "
                             f"minibass.load_model(folder)), got {type(model).__name__} {model!r:.60}")


def check_request(models: Sequence[CausalLM], prompts, max_new_tokens: int, sampling: SamplingParams,
                  attention: str | None = None) -> list[list[int]]:
    """The ValueErrors for bad input that both decoders raise, in one place; returns the prompts as lists of
    Python ints (NumPy integers, unsigned ones too, which torch cannot mix with int64, become ints)."""
    check_models(models)
    if len({model.vocab_size for model in models}) > 1:  # first: a prompt can be out of range for one of them only
        raise ValueError(f"target and draft must share a vocabulary: vocab_size "
                         f"{' vs '.join(str(model.vocab_size) for model in models)}")
    resolve_backend(attention, "cpu")  # an unknown backend name fails here, before any work (None passes)
    if not isinstance(sampling, SamplingParams):
        raise ValueError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not isinstance(prompts, (list, tuple)) and hasattr(prompts, "tolist"):  # a tensor or an array, e.g. input_ids
        raise ValueError(f"prompts must be a list of token-id lists, one per prompt and without padding, got a "
                         f"{type(prompts).__name__}; for a 2-D {type(prompts).__name__} of ids, one row per prompt: "
                         f"[row.tolist() for row in ids] (drop any padding first)")
    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {type(prompts).__name__} "
                         f"{prompts!r:.40}")
    for b, prompt in enumerate(prompts):
        if not isinstance(prompt, (list, tuple)) and hasattr(prompt, "tolist"):  # e.g. tokenizer(...).input_ids[0]
            raise ValueError(f"prompts[{b}] must be a list of token ids, got a {type(prompt).__name__}: pass "
                             f"row.tolist() for each row (without padding)")
        if not isinstance(prompt, (list, tuple)) or len(prompt) == 0:
            raise ValueError(f"prompts[{b}] must be a non-empty list of token ids, got {prompt!r:.60}")
        wrong = next((t for t in prompt if not is_int(t)), None)
        if wrong is not None:
            raise ValueError(f"prompts[{b}] must hold int token ids, got {type(wrong).__name__} {wrong!r:.40}")
        for model, role in zip(models, ["model"] if len(models) == 1 else ["target", "draft"]):
            if any(not 0 <= t < model.vocab_size for t in prompt):
                raise ValueError(f"prompts[{b}] has token ids outside [0, {model.vocab_size})")
            limit = getattr(model, "max_seq_len", None)
            if limit is not None and len(prompt) + max_new_tokens > limit:
                raise ValueError(f"prompts[{b}] ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) "
                                 f"exceeds the {role}'s max_seq_len ({limit})")
    return [[int(t) for t in prompt] for prompt in prompts]


def check_eos(eos_token_id, vocab_size: int) -> tuple[int, ...] | None:
    """``eos_token_id`` as a tuple of ids (None stays None): one int, or several (a list, as in some
    Hugging Face generation configs), each in [0, vocab_size)."""
    if eos_token_id is None:
        return None
    ids = [eos_token_id] if is_int(eos_token_id) else eos_token_id
    if (not isinstance(ids, (list, tuple, set, frozenset)) or not ids
            or any(not is_int(t) or not 0 <= t < vocab_size for t in ids)):
        raise ValueError(f"eos_token_id must be None, a token id or a list of token ids in [0, {vocab_size}), "
                         f"got {eos_token_id!r:.60}")
    return tuple(sorted(int(t) for t in ids))


def last_logits(logits: Tensor, q_lens: Tensor) -> Tensor:
    """The logits of each sequence's last new token: [N, V] packed -> [B, V]; every q_lens[b] must be > 0."""
    return logits[torch.cumsum(q_lens, 0) - 1]


def finished_after(new_tokens: list[int], max_new_tokens: int, eos: tuple[int, ...] | None) -> bool:
    return len(new_tokens) >= max_new_tokens or (eos is not None and bool(new_tokens) and new_tokens[-1] in eos)


# inference_mode rather than no_grad: nothing in decoding is differentiated, and it also drops autograd's
# version counters and view tracking from every tensor operation, much of a small model's step on a CPU
# (scripts/grad_mode.py, docs/design.md#inference-mode). Nothing made here leaves it: the result holds lists,
# and the model keeps its rotary tables as ordinary tensors (Decoder.rope).
@torch.inference_mode()
def generate(model: CausalLM, prompts: list[list[int]], max_new_tokens: int, *,
             sampling: SamplingParams = SamplingParams(), seed=None, attention: str | None = None,
             eos_token_id: int | Sequence[int] | None = None) -> GenerationResult:
    """Batched autoregressive sampling from ``model``: exactly ``max_new_tokens`` new tokens per prompt,
    or fewer when a sequence emits ``eos_token_id`` (kept).

    prompts: one list of int token ids per sequence, any lengths >= 1 (ragged, no padding).
    seed: None, an int (sequence b uses stream ``stream_seed(seed, b)``) or one int per prompt
    (then a prompt's output does not depend on the rest of the batch). See ``SeedStreams``.
    eos_token_id: None, one token id, or a list of them (any of them ends a sequence).
    attention: a key of ``minibass.BACKENDS``, or None for the model's default for its device.
    """
    prompts = check_request([model], prompts, max_new_tokens, sampling, attention)
    eos = check_eos(eos_token_id, model.vocab_size)
    batch = len(prompts)
    streams = SeedStreams(seed, batch)
    out: list[list[int]] = [[] for _ in range(batch)]
    stats = GenerationStats()
    if max_new_tokens == 0:
        return GenerationResult(out, stats)
    started = time.perf_counter()
    cache = model.init_cache(batch, max(len(p) for p in prompts) + max_new_tokens)

    # Prefill: every prompt in one packed step.
    q_lens = torch.tensor([len(p) for p in prompts])
    tokens = torch.tensor([t for p in prompts for t in p])
    logits = model.forward(tokens, q_lens, cache, attention=attention)
    stats.target_calls += 1
    active = list(range(batch))
    next_logits = last_logits(logits, q_lens.to(logits.device))  # (B_active, V)

    while active:
        new = sample(next_logits, sampling, streams, active)[0].tolist()
        stats.steps += 1
        stats.sequence_steps += len(active)
        for b, t in zip(active, new):
            out[b].append(t)
        active = [b for b in active if not finished_after(out[b], max_new_tokens, eos)]
        if not active:
            break
        # Decode step: one token for each active sequence, idle (q_len 0) for the finished ones.
        q_lens = torch.zeros(batch, dtype=torch.long)
        q_lens[active] = 1
        tokens = torch.tensor([out[b][-1] for b in active])
        next_logits = model.forward(tokens, q_lens, cache, attention=attention)
        stats.target_calls += 1
    stats.new_tokens = sum(len(o) for o in out)
    stats.wall_time = time.perf_counter() - started
    return GenerationResult(out, stats)
