"""minibass: batched speculative decoding (BASS), small and readable.

Reading order: sampling -> attention/ -> cache -> model -> loading -> generate.
"""

from . import attention, sampling
from .attention import BACKENDS
from .cache import KVCache
from .generate import CausalLM, Cache, GenerationResult, GenerationStats, generate
from .loading import load_model, load_tokenizer
from .model import Decoder, ModelConfig
from .sampling import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "BACKENDS", "Cache", "CausalLM", "Decoder", "GenerationResult", "GenerationStats", "KVCache",
    "ModelConfig", "SamplingParams", "attention", "generate", "load_model", "load_tokenizer", "sampling",
]
