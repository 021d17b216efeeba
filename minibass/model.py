"""A compact Llama-family decoder (Llama, Mistral, Qwen2) over packed, ragged token batches.

One forward step takes ``q_lens[b]`` new tokens for every sequence ``b``, concatenated into
one flat tensor: embeddings, projections, norms and the MLP see ``[N, ...]`` with
``N = q_lens.sum()`` and no padding at all. Only attention needs to know which token belongs
to which sequence; it reads the per-sequence KV cache through one of the backends in
``minibass.attention``, chosen by name.

The hot path does less: ``Decoder.forward`` checks its inputs and builds the step — packed
positions, the attention metadata, each token's rotary cos/sin rows (read from tables the model
builds once, ``Decoder.rope``) — once, from lengths the cache keeps on the host; every layer
then only computes. No layer reads a device value into
Python, so on a GPU a step runs without stalls.

Module names mirror Hugging Face's (``model.layers.0.self_attn.o_proj`` ...) except for two
fused projections, as in gpt-fast and nanoGPT: ``qkv_proj`` = [q_proj; k_proj; v_proj] and
``gate_up_proj`` = [gate_proj; up_proj], one matmul where the checkpoint has three and two.
``minibass.loading`` concatenates the checkpoint's weights at load time.

Shapes: B batch, N packed new tokens, H heads, Hk kv heads, D head dim, C cache capacity,
V vocab, E hidden size, F MLP size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .attention import FORWARDS, AttentionMetadata, resolve_backend
from .cache import KVCache


@dataclass
class ModelConfig:
    """What the decoder needs to know; ``minibass.loading.config_from_hf`` builds it from config.json."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # None, {"rope_type": "linear", "factor"} or Llama-3 {"rope_type": "llama3", ...}
    qkv_bias: bool = False  # Qwen2: True
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    model_type: str = "llama"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"config {name} must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head_dim, got {self.head_dim}")
        kind = (self.rope_scaling or {}).get("rope_type", "default")
        if kind not in ("default", "linear", "llama3"):
            raise ValueError(f"rope scaling type {kind!r} is not implemented (supported: default, linear, llama3)")


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, computed in float32 as in Llama."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.to(torch.float32) if dtype != torch.float64 else x
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_inv_freq(config: ModelConfig) -> Tensor:
    """Rotary inverse frequencies [D/2]: theta^(-2i/D), adjusted by the checkpoint's rope scaling.

    Computed on the CPU whatever the default device: on the meta device ``arange`` imports
    torch._dynamo (see ``Backbone``)."""
    d = config.head_dim
    two_i = torch.arange(0, d, 2, dtype=torch.float64, device="cpu")  # 0, 2, ..., D - 2
    inv_freq = 1.0 / (config.rope_theta ** (two_i / d))  # (D/2,)
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between
        # them interpolated smoothly (Meta's reference `apply_scaling`).
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        inv_freq = torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
    return inv_freq


def rope_tables(positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and signed sin [N, 1, D] for the tokens at ``positions`` [N], built once per step.

    Angles are computed in float64 (exact for any position) and rounded once to ``dtype``. The
    sin table carries rotate_half's sign: [-sin, sin].
    """
    angles = positions[:, None].to(torch.float64) * inv_freq[None, :]  # (N, D/2)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([cos, cos], -1)[:, None].to(dtype), torch.cat([-sin, sin], -1)[:, None].to(dtype)  # (N, 1, D)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotates pairs (x[i], x[i + D/2]) by the position's angle (Hugging Face's rotate_half layout):

        out = x * cos + rotate_half(x) * sin,   rotate_half(x) = [x2, x1], sin = [-sin, sin]

    x: [N, H, D]; cos, sin: [N, 1, D] from ``rope_tables``.
    """
    x1, x2 = x.chunk(2, dim=-1)  # (N, H, D/2) each
    return x * cos + torch.cat([x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = (config.num_attention_heads,
                                                        config.num_key_value_heads, config.head_dim)
        e, d = config.hidden_size, config.head_dim
        self.qkv_proj = nn.Linear(e, (self.n_heads + 2 * self.n_kv_heads) * d, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * d, e, bias=config.o_bias)
        self.scale = d ** -0.5

    def forward(self, x: Tensor, step: "Step", kv_cache: Tensor) -> Tensor:
        n, h, hk = x.shape[0], self.n_heads, self.n_kv_heads
        qkv = self.qkv_proj(x).view(n, h + 2 * hk, self.head_dim)  # (N, H + 2Hk, D): queries, keys, values
        qk = qkv[:, :h + hk]  # (N, H + Hk, D)
        qk.copy_(apply_rope(qk, step.cos, step.sin))  # rotate queries and keys together, in place
        q, kv = qkv.split([h, 2 * hk], dim=1)  # (N, H, D), (N, 2Hk, D)
        # Append each token's key and value at its own sequence's next free slot, in one write.
        meta = step.meta
        kv_cache[:, meta.seq_ids, :, meta.positions] = kv.view(n, 2, hk, self.head_dim)  # kv_cache: (2, B, Hk, C, D)
        out = step.attention(q, kv_cache[0], kv_cache[1], meta, self.scale)  # (N, H, D)
        return self.o_proj(out.reshape(n, h * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up in one matmul."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        e, f = config.hidden_size, config.intermediate_size
        self.gate_up_proj = nn.Linear(e, 2 * f, bias=config.mlp_bias)
        self.down_proj = nn.Linear(f, e, bias=config.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # (N, F) each
        return self.down_proj(nn.functional.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, step: "Step", kv_cache: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), step, kv_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """Hugging Face's ``model.`` prefix: embeddings, layers, final norm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        # nn.Embedding's own N(0, 1) init, skipped on the meta device (where ``load_model`` builds the
        # decoder and the checkpoint replaces every weight): there normal_ imports torch._dynamo, 3 s on
        # a 2-core CPU.
        weight = torch.empty(config.vocab_size, config.hidden_size)
        if not weight.is_meta:
            nn.init.normal_(weight)
        self.embed_tokens = nn.Embedding.from_pretrained(weight, freeze=False)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


@dataclass
class Step:
    """Per-step state computed once by ``Decoder.forward`` and shared by every layer."""

    meta: AttentionMetadata  # lengths, packed positions, host maxima (see minibass.attention.base)
    cos: Tensor  # [N, 1, D] rotary tables of each packed token's position (Decoder.rope)
    sin: Tensor  # [N, 1, D]
    attention: object  # FORWARDS[name]: the backend on already-checked inputs


class Decoder(nn.Module):
    """A Llama-family causal LM implementing minibass's ``CausalLM`` protocol."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq = rope_inv_freq(config).to(self.lm_head.weight.device)  # where the weights are built
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # float64 (D/2,)
        self.rope_cache: tuple[Tensor, Tensor] | None = None  # cos, sin [L, 1, D] of positions 0..L-1 (``rope``)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_seq_len(self) -> int:
        return self.config.max_position_embeddings

    def init_cache(self, batch_size: int, capacity: int) -> KVCache:
        """An empty cache for ``batch_size`` sequences of up to ``capacity`` tokens, in the model's dtype/device."""
        w = self.lm_head.weight
        c = self.config
        return KVCache(c.num_hidden_layers, batch_size, c.num_key_value_heads, capacity, c.head_dim,
                       dtype=w.dtype, device=w.device)

    @torch.no_grad()
    def forward(self, tokens: Tensor, q_lens: Tensor, cache: KVCache, *, attention: str | None = None) -> Tensor:
        """tokens: long [N] packed; q_lens: [B]. Returns logits [N, V] and advances ``cache.lengths``.

        attention: a key of ``minibass.attention.BACKENDS``, or None for
        ``default_backend(device)``: "ragged" on CUDA when Triton imports, "padded" on a CPU.

        Runs under ``no_grad``, not inference mode, so the logits are ordinary tensors a caller may edit
        in place.
        ``generate`` and ``speculative_generate`` call it under ``torch.inference_mode()``, which
        skips autograd's bookkeeping too and makes each call cheaper on a CPU; a decoding loop of
        your own can do the same.
        """
        device = self.lm_head.weight.device
        name = resolve_backend(attention, device)
        tokens, q_lens, kv_lens = self.check_step(tokens, q_lens, cache)  # host tensors
        meta = AttentionMetadata.build(q_lens, kv_lens, device)
        x = self.model.embed_tokens(tokens.to(device, non_blocking=True))  # (N, E)
        step = Step(meta, *self.rope(meta.positions, meta.max_kv_len, x.dtype), FORWARDS[name])
        for layer, kv_cache in zip(self.model.layers, cache.kv):
            x = layer(x, step, kv_cache)  # (N, E)
        cache.lengths = kv_lens
        return self.lm_head(self.model.norm(x))  # (N, V)

    def rope(self, positions: Tensor, length: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin [N, 1, D] of ``positions`` [N] (all below ``length``), read from tables of positions
        0..L-1 built by ``rope_tables`` once, and rebuilt twice as long when a step reaches past them:
        two index ops per step instead of the trigonometry."""
        cached = self.rope_cache
        if cached is None or len(cached[0]) < length or cached[0].dtype != dtype or cached[0].device != positions.device:
            size = min(max(2 * length, 256), self.max_seq_len)  # length <= max_seq_len: check_step saw to it
            # Ordinary tensors even when the loops call under inference mode: they stay on the model.
            with torch.inference_mode(False), torch.no_grad():
                self.rope_cache = rope_tables(torch.arange(size, device=positions.device), self.inv_freq, dtype)
        cos, sin = self.rope_cache
        return cos[positions], sin[positions]  # (N, 1, D) each

    def check_step(self, tokens, q_lens, cache: KVCache) -> tuple[Tensor, Tensor, Tensor]:
        """Validates one step on the host; returns (tokens, q_lens, kv_lens) as long CPU tensors.

        kv_lens = cache.lengths + q_lens: the cache lengths after this step's tokens are appended.
        """
        tokens, q_lens = torch.as_tensor(tokens).long().cpu(), torch.as_tensor(q_lens).long().cpu()
        if tokens.dim() != 1 or q_lens.dim() != 1 or q_lens.shape[0] != cache.batch_size:
            raise ValueError(f"tokens must be [N] and q_lens [batch={cache.batch_size}], "
                             f"got {tuple(tokens.shape)} and {tuple(q_lens.shape)}")
        # The lengths are a few host integers: checked as Python lists, cheaper than tensor ops.
        host_q = q_lens.tolist()
        if sum(host_q) != tokens.shape[0] or min(host_q, default=0) < 0:
            raise ValueError(f"q_lens {host_q} must be >= 0 and sum to len(tokens) = {tokens.shape[0]}")
        if tokens.numel():
            low, high = map(int, torch.aminmax(tokens))
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got min {low} max {high}")
        kv_lens = cache.lengths + q_lens
        longest = max(kv_lens.tolist(), default=0)
        if longest > cache.capacity:
            raise ValueError(f"cache capacity {cache.capacity} exceeded: lengths would become {kv_lens.tolist()}")
        if longest > self.max_seq_len:
            raise ValueError(f"sequence length would exceed max_seq_len={self.max_seq_len}: {kv_lens.tolist()}")
        return tokens, q_lens, kv_lens
