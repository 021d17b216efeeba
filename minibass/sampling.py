"""Sampling: from logits to the distribution actually sampled from, and one draw per sequence.

Dimension letters used throughout minibass: B batch, H heads, Hk kv heads, T positions,
D head dim, V vocab, k draft length.

Two rules matter for speculative decoding and are kept here in one place:

1. ``probs(logits, params)`` returns the distribution a token is *actually* drawn from
   (temperature, then top-k, then top-p, renormalised; one-hot for greedy). The rejection
   step compares exactly these distributions on both sides, so both models must go
   through this one function with the same ``SamplingParams``.
2. Randomness is per sequence. ``SeedStreams`` gives sequence ``b`` its own
   ``torch.Generator``; a draw for sequence ``b`` never consumes another sequence's
   numbers, so what a sequence samples does not depend on the rest of the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor


def is_real(x) -> bool:
    """A real number, NumPy's included (a bool is not one here)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def is_int(x) -> bool:
    """An integer as minibass takes one (token ids, seeds, top_k): a Python int or a NumPy integer, not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn.

    temperature: 0 means greedy (argmax, first index on ties); otherwise logits / temperature.
    top_k: keep tokens whose probability is at least the k-th largest (ties kept); 0 disables.
    top_p: keep the smallest set of most likely tokens whose mass reaches top_p; 1.0 disables.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not is_real(self.temperature) or not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {self.temperature!r}")
        if not is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 disables it), got {self.top_k!r}")
        if not is_real(self.top_p) or not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] (1.0 disables it), got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _work_dtype(logits: Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def probs(logits: Tensor, params: SamplingParams = SamplingParams()) -> Tensor:
    """The distribution actually sampled from: temperature -> top-k -> top-p -> renormalise.

    logits: [..., V] float. Returns [..., V] in float32, or float64 if logits are float64.
    Greedy (temperature 0) returns the one-hot vector at the argmax. A row whose logits hold NaN or whose
    maximum is infinite comes out NaN, greedy or not (what the softmax gives it); ``sample_from`` refuses it.

    Top-k compares the temperature-scaled logits (the exact order of the probabilities, not their
    float32 roundings), as transformers does, and keeps every token tied with the k-th. Top-p keeps
    the smallest set of most likely tokens whose mass reaches top_p, summing the probabilities in
    float64 (a float32 sum over 32,000 tokens drifts by 1e-6); a mass within the float64 sum's own
    rounding of top_p (relative 4 V eps, at least 1e-12) counts as reaching it, so that an exact
    boundary is not decided by rounding. Among tokens of equal probability at its boundary, the
    earlier indices are kept. (transformers' top-p sorts without a stable order, so which of the
    tied tokens it keeps depends on the sort's implementation; on rows without ties the two agree,
    up to transformers' own float32 rounding.)
    """
    if not torch.is_tensor(logits) or not logits.is_floating_point() or logits.dim() < 1:
        raise ValueError(f"logits must be a floating-point tensor [..., V], got {type(logits).__name__}"
                         f"{tuple(logits.shape) if torch.is_tensor(logits) else ''}")
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    logits = logits.to(_work_dtype(logits))
    if params.greedy:  # one-hot at the argmax (max(-1) is the argmax with the same first-index ties, faster on CPUs)
        top, at = logits.max(-1)
        one_hot = torch.zeros_like(logits).scatter_(-1, at[..., None], 1.0)
        return torch.where(torch.isfinite(top)[..., None], one_hot, torch.nan)  # NaN rows where the softmax's are

    # The max is taken out before dividing: the same softmax, and a tiny temperature gives -inf
    # (probability 0) off the argmax instead of inf - inf = NaN. A temperature that float32 rounds to 0
    # (below about 7e-46) would give 0 / 0 = NaN at the argmax: such a row is scaled in float64.
    out_dtype = logits.dtype
    if logits.dtype == torch.float32 and params.temperature <= 2.0 ** -150:  # half float32's smallest subnormal
        logits = logits.double()
    z = (logits - logits.amax(-1, keepdim=True)) / params.temperature  # [..., V], scaled logits
    if 0 < params.top_k < z.shape[-1]:
        kth = torch.topk(z, params.top_k, dim=-1).values[..., -1:]  # [..., 1], the k-th largest
        z = z.masked_fill(z < kth, float("-inf"))  # ties with the k-th are kept
    p = torch.softmax(z, dim=-1)  # [..., V]
    if params.top_p < 1.0:
        # Keep a token while the mass of the tokens before it (most likely first; ties: the earlier
        # index first) falls short of top_p. The first token is always kept.
        sorted_p, order = torch.sort(p, dim=-1, descending=True, stable=True)
        running = sorted_p.double().cumsum(-1)  # [..., V], float64 sums of p's own values
        before = torch.cat([torch.zeros_like(running[..., :1]), running[..., :-1]], -1)  # mass before each token
        slack = max(1e-12, 4 * p.shape[-1] * torch.finfo(torch.float64).eps)  # the running sum's rounding
        keep_sorted = before < params.top_p * running[..., -1:] * (1 - slack)
        keep_sorted[..., 0] = True  # the most likely token, by construction
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        p = p.masked_fill(~keep, 0.0)
        p = p / p.sum(-1, keepdim=True)
    return p.to(out_dtype)


def sample_from(p: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF sampling: one token per row of ``p`` from uniforms ``u``.

    p: [N, V] probabilities (rows need not be exactly normalised); u: [N] in [0, 1).
    Returns long [N]. A token with zero probability is never returned: a row with no finite
    positive mass (NaN or infinite logits, e.g. a float16 overflow) raises a ValueError.
    """
    cdf = p.to(torch.float64).cumsum(-1)  # [N, V]
    total = cdf[:, -1:].contiguous()  # [N, 1]
    target = u.to(cdf.device, torch.float64)[:, None] * total  # [N, 1], strictly below the total mass
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # first i with cdf[i] > target
    # Rounding can push target onto the total; fall back to the last token with mass, which is
    # where the (non-decreasing) cdf first reaches its total.
    last_positive = torch.searchsorted(cdf, total).squeeze(-1)
    # One read (one wait for the device, after the work is queued; the caller reads the tokens next): every
    # row's mass is finite and positive exactly when the smallest is positive and the largest finite, and a
    # NaN anywhere makes both NaN (aminmax propagates it).
    lowest, highest = torch.stack(total.aminmax()).tolist() if len(total) else (1.0, 1.0)
    if not (lowest > 0 and math.isfinite(highest)):
        bad = (~(torch.isfinite(total[:, 0]) & (total[:, 0] > 0))).nonzero().flatten().tolist()
        raise ValueError(f"cannot sample: rows {bad[:5]} of the distribution are NaN, infinite or all zero "
                         "(did the model return non-finite logits, e.g. a float16 overflow?)")
    return torch.minimum(idx, last_positive)


def greedy_tokens(logits: Tensor) -> Tensor:
    """Greedy decoding's token: the first index of the maximum of each row of ``logits`` [..., V], long [...]
    (``max(-1)``, the same ties as argmax, faster on CPUs). A row whose maximum is NaN or infinite raises a
    ValueError, as ``sample_from`` does, rather than returning the index of a NaN."""
    values, tokens = logits.max(-1)
    # One number read (one wait for the device, after the work is queued): the sum of the maxima, in float32 at
    # least (a float16 sum of a few thousand rows would overflow), is finite unless one of them is NaN or
    # infinite. If large finite maxima overflow it, the row check finds no bad row and the tokens are returned.
    if not math.isfinite(values.sum(dtype=torch.promote_types(values.dtype, torch.float32))):
        bad = (~torch.isfinite(values)).flatten().nonzero().flatten().tolist()
        if bad:
            raise ValueError(f"cannot decode greedily: rows {bad[:5]} of the logits have a NaN or infinite maximum "
                             "(did the model return non-finite logits, e.g. a float16 overflow?)")
    return tokens


def sample(logits: Tensor, params: SamplingParams, streams: "SeedStreams", rows: Sequence[int]) -> tuple[Tensor, Tensor]:
    """One token per row of ``logits`` [R, V] for the sequences ``rows``.

    Returns (tokens long [R], the distribution they were drawn from [R, V], i.e. ``probs``).
    The same draw as ``sample_from(probs(logits, params), uniforms)``; greedy takes the argmax
    and consumes no random numbers.
    """
    if params.greedy:
        tokens = greedy_tokens(logits)
        return tokens, logits.new_zeros(logits.shape, dtype=_work_dtype(logits)).scatter_(-1, tokens[:, None], 1.0)
    p = probs(logits, params)  # (R, V)
    return sample_from(p, streams.uniform(rows)[:, 0]), p


def stream_seed(seed: int, index: int) -> int:
    """The seed of sequence ``index``'s random stream under batch seed ``seed`` (NumPy SeedSequence mixing)."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, np.uint64)[0] >> 1)


class SeedStreams:
    """One independent random stream per sequence.

    ``seed`` may be:
      * an int ``s`` — sequence ``b`` uses ``stream_seed(s, b)``;
      * a sequence of ints, one per prompt — sequence ``b`` uses exactly ``seed[b]``, so a
        prompt's samples do not depend on what else is in the batch;
      * None — fresh entropy.
    Streams live on the CPU and hand out float64 uniforms; only sequences that draw consume numbers.
    """

    def __init__(self, seed: int | Sequence[int] | None, batch_size: int):
        def valid(s) -> bool:  # a non-negative int below 2**63 (minibass's bound; manual_seed takes more)
            return is_int(s) and 0 <= s < 2 ** 63

        if seed is None:
            seeds = [int(s) for s in np.random.SeedSequence().generate_state(batch_size, np.uint64) >> 1]
        elif valid(seed):
            seeds = [stream_seed(int(seed), b) for b in range(batch_size)]
        elif isinstance(seed, Sequence) and not isinstance(seed, str) and all(valid(s) for s in seed):
            if len(seed) != batch_size:
                raise ValueError(f"seed: got {len(seed)} per-prompt seeds for {batch_size} prompts")
            seeds = [int(s) for s in seed]
        else:
            raise ValueError("seed must be None, an int in [0, 2**63), or a list of such ints (one per prompt), "
                             f"got {seed!r:.80}")
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]

    def uniform(self, rows: Sequence[int] | Tensor, n: int = 1) -> Tensor:
        """Draws ``n`` uniforms in [0, 1) for each sequence in ``rows``; returns float64 [len(rows), n]."""
        rows = rows.tolist() if torch.is_tensor(rows) else list(rows)
        if not rows:
            return torch.empty(0, n, dtype=torch.float64)
        return torch.stack([torch.rand(n, generator=self.generators[b], dtype=torch.float64) for b in rows])

    def uniform_ragged(self, rows: Sequence[int], counts: Sequence[int], width: int) -> Tensor:
        """Draws ``counts[j]`` uniforms for sequence ``rows[j]``, left-aligned in a zero-padded float64
        [len(rows), width] (the same numbers as ``uniform([rows[j]], counts[j])``)."""
        out = torch.zeros(len(rows), width, dtype=torch.float64)
        for j, (b, n) in enumerate(zip(rows, counts)):
            torch.rand(n, generator=self.generators[b], dtype=torch.float64, out=out[j, :n])
        return out
