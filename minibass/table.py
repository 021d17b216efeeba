"""A lookup-table causal LM: the next-token logits are a function of the recent context and position.

Small vocabularies make exact enumeration possible (``minibass.exact``), and a table makes the
model's distributions explicit, so tests, the course and the oracle use ``TableLM`` wherever a
real transformer would only add noise. It implements the same ``CausalLM`` protocol as
``minibass.model.Decoder``: packed ragged ``forward``, a cache with ``lengths`` and ``truncate``.

    logits(next token | tokens so far) = table[position % period, code(last `order` tokens)]

where positions before the start of the sequence read as a virtual token ``V``, so the context
code ranges over ``(V + 1) ** order`` values. ``order=0`` gives a position-only model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cache import checked_truncation, pack_positions


class TableCache:
    """Token history per sequence: tokens [B, C] and lengths [B]."""

    def __init__(self, batch_size: int, capacity: int):
        self.tokens = torch.zeros(batch_size, capacity, dtype=torch.long)
        self.lengths = torch.zeros(batch_size, dtype=torch.long)

    def truncate(self, lengths) -> None:
        self.lengths = checked_truncation(lengths, self.lengths)


class TableLM:
    """A causal LM whose next-token logits are looked up: ``table[position % period, code(last order tokens)]``.

    table: float [period, (V + 1) ** order, V] of logits (-inf allowed, not a whole row); positions before the
    start of a sequence read as a virtual token V, so the context code ranges over (V + 1) ** order values,
    and order=0 gives a position-only model. max_seq_len: the longest sequence ``forward`` accepts (default:
    unbounded). ``from_probs`` builds one from probabilities.
    """

    def __init__(self, table: Tensor, *, order: int, max_seq_len: int | None = None):
        table = torch.as_tensor(table, dtype=torch.float64)
        if table.dim() != 3 or not table.shape[0] or not table.shape[-1]:
            raise ValueError(f"table must be [period >= 1, (V+1)**order, V >= 1], got shape {tuple(table.shape)}")
        if isinstance(order, bool) or not isinstance(order, int) or order < 0:
            raise ValueError(f"order must be an int >= 0, got {order!r}")
        if torch.isnan(table).any() or torch.isposinf(table).any():
            raise ValueError("table logits must be finite or -inf (probability 0), not NaN or +inf")
        vocab = table.shape[-1]
        if table.shape[1] != (vocab + 1) ** order:
            raise ValueError(f"table has {table.shape[1]} context rows, expected (V+1)**order = {(vocab + 1) ** order}")
        if torch.isneginf(table).all(-1).any():
            raise ValueError("every table row needs at least one finite logit")
        self.table, self.order, self.vocab_size, self.max_seq_len = table, order, vocab, max_seq_len

    @classmethod
    def random(cls, vocab_size: int, *, order: int = 1, period: int = 1, seed: int = 0, sharpness: float = 2.0,
               zero_fraction: float = 0.0, max_seq_len: int | None = None) -> "TableLM":
        """Gaussian logits scaled by ``sharpness``; each logit is -inf with probability ``zero_fraction``."""
        g = torch.Generator().manual_seed(seed)
        shape = (period, (vocab_size + 1) ** order, vocab_size)
        table = torch.randn(shape, generator=g, dtype=torch.float64) * sharpness
        if zero_fraction:
            dead = torch.rand(shape, generator=g) < zero_fraction
            dead[..., 0] &= ~dead.all(-1)  # keep at least one token per row
            table = table.masked_fill(dead, float("-inf"))
        return cls(table, order=order, max_seq_len=max_seq_len)

    @classmethod
    def from_probs(cls, probs: Tensor, **kwargs) -> "TableLM":
        """An order-0 model: row t of ``probs`` [T, V] is the next-token distribution at position t (cycled)."""
        probs = torch.as_tensor(probs, dtype=torch.float64)
        if probs.dim() != 2 or not torch.isfinite(probs).all() or (probs < 0).any():
            raise ValueError(f"probs must be [T, V] of finite values >= 0, got shape {tuple(probs.shape)}")
        return cls(probs.log()[:, None, :], order=0, **kwargs)

    def init_cache(self, batch_size: int, capacity: int) -> TableCache:
        return TableCache(batch_size, capacity)

    def forward(self, tokens: Tensor, q_lens: Tensor, cache: TableCache, *, attention: str | None = None) -> Tensor:
        """tokens: long [N] packed; returns float64 logits [N, V] and advances ``cache.lengths``."""
        tokens, q_lens = torch.as_tensor(tokens).long().cpu(), torch.as_tensor(q_lens).long().cpu()
        if q_lens.shape != cache.lengths.shape or int(q_lens.sum()) != tokens.numel() or (q_lens < 0).any():
            raise ValueError(f"q_lens {q_lens.tolist()} must be >= 0, one per sequence, and sum to {tokens.numel()}")
        if (cache.lengths + q_lens > cache.tokens.shape[1]).any():
            raise ValueError("table cache capacity exceeded")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        seq, _, pos = pack_positions(q_lens, cache.lengths)  # (N,) sequence and position of each token
        cache.tokens[seq, pos] = tokens
        code = torch.zeros_like(pos)
        for back in range(self.order - 1, -1, -1):  # the last `order` tokens up to and including pos
            idx = pos - back
            tok = torch.where(idx >= 0, cache.tokens[seq, idx.clamp(min=0)], self.vocab_size)  # V: before the start
            code = code * (self.vocab_size + 1) + tok
        cache.lengths = cache.lengths + q_lens
        return self.table[(pos + 1) % self.table.shape[0], code]  # (N, V): history length pos + 1

    __call__ = forward
