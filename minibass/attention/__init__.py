"""Ragged-batch attention backends, one per file, all with the signature in ``base.py``.

    naive   the specification: loops over sequences and heads (naive.py)
    padded  BASS-PAD: pad to the batch maximum, one batched QK^T and one PV, padding masked to -inf (padded.py)
    split   BASS-SPLIT: one attention call per sequence on its exact lengths (split.py)
    ragged  one Triton kernel launch for the whole ragged batch (ragged.py)

``cost()`` (cost.py) computes, for a ragged batch, the useful work and what each strategy does.
"""

from .base import AttentionFn, check_inputs
from .cost import Cost, cost
from .naive import naive
from .padded import padded
from .ragged import ragged
from .split import split

BACKENDS: dict[str, AttentionFn] = {"naive": naive, "padded": padded, "split": split, "ragged": ragged}

__all__ = ["BACKENDS", "AttentionFn", "Cost", "check_inputs", "cost", "naive", "padded", "ragged", "split"]
