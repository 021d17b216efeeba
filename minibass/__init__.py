"""minibass: batched speculative decoding (BASS), small and readable.

Reading order (as in the README): sampling -> cache -> attention/ -> model -> loading -> generate -> rejection -> table
-> exact -> draft_length -> speculative -> costmodel.
"""

from . import attention, exact, sampling
from .attention import BACKENDS
from .cache import KVCache
from .generate import CausalLM, Cache, GenerationResult, GenerationStats, generate
from .loading import load_model, load_tokenizer
from .model import Decoder, ModelConfig
from .rejection import rejection_sample
from .sampling import SamplingParams
from .speculative import speculative_generate
from .table import TableLM

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

__all__ = [
    "BACKENDS", "Cache", "CausalLM", "Decoder", "GenerationResult", "GenerationStats", "KVCache",
    "ModelConfig", "SamplingParams", "TableLM", "attention", "exact", "generate", "load_model", "load_tokenizer",
    "rejection_sample", "sampling", "speculative_generate",
]


def __getattr__(name: str):
    """``minibass.zoo`` and ``minibass.oracle`` without importing them first: loaded on first use, so that
    ``import minibass`` stays light."""
    if name in ("zoo", "oracle"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
