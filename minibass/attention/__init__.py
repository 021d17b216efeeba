"""Ragged-batch attention backends, one per file, all with the signature in ``base.py``.

    naive   the specification: loops over sequences and heads (naive.py)
    padded  BASS-PAD: pad to the batch maximum, one batched QK^T and one PV, padding masked to -inf (padded.py)
    split   BASS-SPLIT: one attention call per sequence on its exact lengths (split.py)
    ragged  one Triton kernel launch for the whole ragged batch (ragged.py)

``BACKENDS[name]`` is the public, checked function; ``FORWARDS[name]`` is its twin on
already-checked inputs with the step's ``AttentionMetadata``, which the decoder calls in every
layer. ``default_backend(device)`` is what ``attention=None`` means. ``cost()`` (cost.py)
computes, for a ragged batch, the useful work and what each strategy does.
"""

from __future__ import annotations

import functools

import torch

from .base import AttentionFn, AttentionMetadata, check_inputs
from .cost import Cost, cost
from .naive import naive, naive_forward
from .padded import padded, padded_forward
from .ragged import ragged, ragged_forward
from .split import split, split_forward

BACKENDS: dict[str, AttentionFn] = {"naive": naive, "padded": padded, "split": split, "ragged": ragged}
FORWARDS = {"naive": naive_forward, "padded": padded_forward, "split": split_forward, "ragged": ragged_forward}


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether Triton imports (it is installed only on Linux)."""
    try:
        from . import triton_shim  # noqa: F401
    except ImportError:
        return False
    return True


def default_backend(device: torch.device | str) -> str:
    """The backend ``attention=None`` picks for tensors on ``device``.

    CUDA: ``"ragged"`` (one kernel launch, nothing padded) when Triton imports, else ``"padded"``.
    Anything else (the CPU): ``"padded"``, the fastest exact backend there as measured by
    ``bench attention`` on the 2-core CPU machine: fastest in 21 of its 36 cells, taking 12 % less
    time than ``"split"`` in geometric mean (at batch 1 the two are within 65 µs, split ahead with one
    new token and PAD with four; split also wins where cache lengths spread widely, where PAD computes
    twice the useful work), and 2x faster than split in ``bench decode`` at batch 16. The ragged kernel
    would run in Triton's interpreter: never the interpreted kernel by default.
    """
    if torch.device(device).type == "cuda":
        return "ragged" if triton_available() else "padded"
    return "padded"


def resolve_backend(attention: str | None, device: torch.device | str) -> str:
    """``attention`` checked against ``BACKENDS``, with None replaced by ``default_backend(device)``."""
    if attention is None:
        return default_backend(device)
    if attention not in BACKENDS:
        raise ValueError(f"attention must be one of {sorted(BACKENDS)} or None (the device's default), "
                         f"got {attention!r}")
    return attention


__all__ = ["BACKENDS", "FORWARDS", "AttentionFn", "AttentionMetadata", "Cost", "check_inputs", "cost",
           "default_backend", "naive", "padded", "ragged", "resolve_backend", "split", "triton_available"]
