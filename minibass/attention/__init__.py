"""Ragged-batch attention backends, one per file, all with the signature in ``base.py``.

    naive   the specification: loops over sequences and heads
    padded  BASS-PAD: pad to the batch maximum, one batched QK^T and one PV, padding masked to -inf
    split   BASS-SPLIT: one attention call per sequence on its exact lengths
    ragged  one Triton kernel launch for the whole ragged batch
"""

from .base import AttentionFn, check_inputs
from .naive import naive

BACKENDS: dict[str, AttentionFn] = {"naive": naive}

__all__ = ["BACKENDS", "AttentionFn", "check_inputs", "naive"]
