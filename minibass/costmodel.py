"""How long a decoding step takes, from a model's shape: FLOPs, bytes, and fixed costs per call.

One forward call of a decoder over ``B`` sequences, ``t`` new tokens each, with ``c`` tokens
already cached per sequence (a roofline model, Williams et al. 2009, plus fixed costs):

    flops  = 2 * B t * P_matmul  +  4 * L * H * D * B * t * (c + (t + 1) / 2)      (attention)
    bytes  = b * P_read          +  2 * L * Hk * D * b * B * (c + t)               (weights + KV cache)
    time   = max(flops / peak, bytes / bandwidth)  +  call_overhead  +  L * layer_overhead

``P_matmul`` counts every weight a token multiplies (the output head included), ``P_read`` every
weight a call reads once (the embedding table is only gathered from, so it is left out when the
head is not tied to it), ``b`` bytes per element. A call over ``B`` sequences of ``t`` tokens reads every
weight once for ``2 B t`` FLOPs per weight: arithmetic intensity ``~ 2 B t / b`` FLOPs per byte. Below the
hardware's ridge point ``peak / bandwidth`` the step is memory-bound and a bigger batch (or more
tokens per sequence, as in a verify call) is nearly free; above it, compute-bound.

Speculative decoding with draft length ``k`` and per-token acceptance ``alpha`` emits on average
``E = (1 - alpha^(k+1)) / (1 - alpha)`` tokens per sequence per step, for one verify call of
``k + 1`` tokens and ``k`` one-token draft calls:

    speed-up = E * time(target, t=1) / (time(target, t=k+1) + k * time(draft, t=1))

On a GPU the roofline terms dominate for large models; on a CPU, for the small demo models, the
fixed costs do (a forward call of a tiny model is mostly per-layer overhead), which is why
``Hardware`` carries them and ``calibrate`` fits them from measured calls.

Spec-sheet numbers of the data-centre GPUs are dense bf16 tensor-core peaks and HBM bandwidths,
from NVIDIA's datasheets (URLs in ``source``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import torch

from .draft_length import expected_tokens
from .sampling import is_int


@dataclass(frozen=True)
class Hardware:
    """A device for the cost model: peak FLOP/s, bandwidth in bytes/s, fixed seconds per call and per layer."""

    name: str
    peak_flops: float
    bandwidth: float
    call_overhead: float = 0.0
    layer_overhead: float = 0.0
    source: str = ""

    def __post_init__(self):
        values = (self.peak_flops, self.bandwidth, self.call_overhead, self.layer_overhead)
        if not all(math.isfinite(x) for x in values) or self.peak_flops <= 0 or self.bandwidth <= 0 \
                or self.call_overhead < 0 or self.layer_overhead < 0:
            raise ValueError(f"Hardware needs finite numbers: peak_flops > 0, bandwidth > 0, overheads >= 0; got {self}")

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound."""
        return self.peak_flops / self.bandwidth


A100 = Hardware("A100 SXM 80GB", 312e12, 2.039e12, source="https://www.nvidia.com/content/dam/en-zz/Solutions/"
                "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
H100 = Hardware("H100 SXM", 989e12, 3.35e12, source="https://www.nvidia.com/en-us/data-center/h100/")
H200 = Hardware("H200 SXM", 989e12, 4.8e12, source="https://www.nvidia.com/en-us/data-center/h200/")
GPUS = (A100, H100, H200)


@dataclass(frozen=True)
class ModelShape:
    """A Llama-family decoder's shape: L layers, hidden d, H heads, Hk kv heads, MLP width, vocab V, and the
    head dim D (``hidden // heads`` unless the checkpoint says otherwise, as some do)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = True
    bytes_per_element: int = 2
    head_dim: int | None = None  # None: hidden // heads

    def __post_init__(self):
        sizes = dict(layers=self.layers, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads,
                     intermediate=self.intermediate, vocab=self.vocab, bytes_per_element=self.bytes_per_element)
        if self.head_dim is not None:
            sizes["head_dim"] = self.head_dim
        bad = {name: value for name, value in sizes.items() if not is_int(value) or value < 1}
        if bad:
            raise ValueError(f"ModelShape needs whole numbers >= 1, got {bad}")
        if self.heads % self.kv_heads:
            raise ValueError(f"ModelShape needs heads ({self.heads}) to be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)  # (a frozen dataclass)

    @classmethod
    def from_config(cls, config, bytes_per_element: int = 2) -> "ModelShape":
        """From a transformers ``LlamaConfig`` (or anything with its attribute names), its ``head_dim`` included."""
        return cls(config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
                   getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
                   config.intermediate_size, config.vocab_size, bool(getattr(config, "tie_word_embeddings", False)),
                   bytes_per_element, getattr(config, "head_dim", None))

    @property
    def layer_params(self) -> int:
        d, D = self.hidden, self.head_dim
        return d * self.heads * D * 2 + d * self.kv_heads * D * 2 + 3 * d * self.intermediate  # q, o, k, v; SwiGLU

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.vocab * self.hidden * (1 if self.tied else 2)

    def flops(self, batch: int, tokens: int, context: int) -> float:
        """FLOPs of one call: ``batch`` sequences, ``tokens`` new each, after ``context`` cached."""
        n = batch * tokens
        matmul = 2 * n * (self.layers * self.layer_params + self.vocab * self.hidden)
        attention = 4 * self.layers * self.heads * self.head_dim * n * (context + (tokens + 1) / 2)
        return matmul + attention

    def bytes(self, batch: int, tokens: int, context: int) -> float:
        """Bytes one call must move at least: every weight once, every cached key and value once."""
        weights = self.layers * self.layer_params + self.vocab * self.hidden
        cache = 2 * self.layers * self.kv_heads * self.head_dim * batch * (context + tokens)
        return self.bytes_per_element * (weights + cache)

    def intensity(self, batch: int, tokens: int, context: int) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops(batch, tokens, context) / self.bytes(batch, tokens, context)


def step_time(shape: ModelShape, hw: Hardware, batch: int, tokens: int = 1, context: int = 0) -> float:
    """Seconds of one forward call: max(flops / peak, bytes / bandwidth) + fixed costs."""
    roof = max(shape.flops(batch, tokens, context) / hw.peak_flops, shape.bytes(batch, tokens, context) / hw.bandwidth)
    return roof + hw.call_overhead + shape.layers * hw.layer_overhead


def critical_batch(shape: ModelShape, hw: Hardware, tokens: int = 1, context: int = 0) -> int | None:
    """The smallest batch at which a call of ``tokens`` tokens per sequence becomes compute-bound, or ``None``
    if none does.

    A call's FLOPs grow in proportion to the batch, its bytes by a fixed part (the weights) plus a part per
    sequence (its cache). Where a sequence's own cache traffic takes longer than its FLOPs (long contexts, few
    new tokens), the intensity levels off below the ridge point, and no batch is compute-bound.
    """
    if tokens < 1 or context < 0:
        raise ValueError(f"critical_batch needs tokens >= 1 and context >= 0, got tokens={tokens}, context={context}")

    def compute_bound(batch: int) -> bool:
        return shape.flops(batch, tokens, context) / hw.peak_flops >= shape.bytes(batch, tokens, context) / hw.bandwidth

    weight_bytes = shape.bytes(0, tokens, context)
    weights = weight_bytes / hw.bandwidth  # seconds to read the weights
    per_sequence = (shape.flops(1, tokens, context) / hw.peak_flops  # a sequence's FLOPs, less its cache reads
                    - (shape.bytes(1, tokens, context) - weight_bytes) / hw.bandwidth)
    if per_sequence <= 0:
        return None
    batch = max(1, math.ceil(weights / per_sequence))
    while batch > 1 and compute_bound(batch - 1):  # the closed form, mended where float rounding moved it
        batch -= 1
    while not compute_bound(batch):
        batch += 1
    return batch


def speculative_speedup(target: ModelShape, draft: ModelShape, hw: Hardware, *, batch: int, k: int, alpha: float,
                        context: int = 0) -> float:
    """Expected speed-up of speculative decoding over regular decoding, per sequence (module docstring)."""
    regular = step_time(target, hw, batch, 1, context)
    step = step_time(target, hw, batch, k + 1, context) + k * step_time(draft, hw, batch, 1, context)
    return expected_tokens(alpha, k) * regular / step


def speedup_from_costs(regular: float, verify: float, draft: float, *, k: int, alpha: float) -> float:
    """The same prediction from measured seconds: a regular step, a verify of k + 1 tokens, a draft call."""
    return expected_tokens(alpha, k) * regular / (verify + k * draft)


def cpu_threads() -> str:
    """The threads PyTorch computes with on the CPU, in words ("1 thread", "2 threads"): timings depend on them."""
    threads = torch.get_num_threads()
    return f"{threads} thread{'s' * (threads != 1)}"


def measure_cpu(size: int = 512, megabytes: int = 256, reps: int = 5) -> Hardware:
    """This machine's CPU, measured: fp32 matmul FLOP/s and the bandwidth of summing a large tensor."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    big = torch.empty(megabytes * (1 << 20) // 4)
    big.fill_(1.0)

    def best(fn):
        fn()  # warm-up
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    flops = 2 * size ** 3 / best(lambda: a @ b)
    bandwidth = big.numel() * 4 / best(big.sum)
    return Hardware(f"this CPU ({cpu_threads()}, fp32)", flops, bandwidth,
                    source="measured by minibass.costmodel.measure_cpu")


def calibrate(hw: Hardware, shapes_and_seconds: list[tuple[ModelShape, int, int, int, float]]) -> Hardware:
    """Fits ``call_overhead`` and ``layer_overhead`` (least squares, both >= 0) to measured calls.

    Each entry is (shape, batch, tokens, context, measured seconds); the roofline part is
    subtracted and the rest explained as ``call_overhead + layers * layer_overhead``.
    """
    if len(shapes_and_seconds) < 2:
        raise ValueError("calibrate needs at least two measured calls")
    xs = [float(s.layers) for s, *_ in shapes_and_seconds]
    ys = [sec - step_time(s, hw, b, t, c) + hw.call_overhead + s.layers * hw.layer_overhead
          for s, b, t, c, sec in shapes_and_seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    intercept = my - slope * mx
    if not var or slope < 0:  # one depth only, or costs falling with depth: all of it per call
        slope, intercept = 0.0, max(0.0, my)
    elif intercept < 0:  # the best line through the origin instead (the constrained least-squares fit)
        slope, intercept = max(0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)), 0.0
    return replace(hw, call_overhead=intercept, layer_overhead=slope)


def alpha_from_accepted(mean_accepted: float, k: int) -> float:
    """The per-token acceptance alpha whose expected accepted prefix, alpha (1 - alpha^k) / (1 - alpha),
    equals ``mean_accepted`` draft tokens per step (by bisection: the prefix grows with alpha)."""
    if not 0 <= mean_accepted <= k:
        raise ValueError(f"mean_accepted must be in [0, k] = [0, {k}], got {mean_accepted}")
    low, high = 0.0, 1.0
    for _ in range(60):
        alpha = (low + high) / 2
        low, high = (alpha, high) if expected_tokens(alpha, k) - 1 < mean_accepted else (low, alpha)
    return (low + high) / 2
