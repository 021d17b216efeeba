"""``check_generator``: a whole speculative generator, end to end, against the exact distribution.

The engine under test gets two Hugging Face folders the oracle writes (a tiny Llama target and
a draft over a vocabulary of ``VOCAB`` tokens, float32 safetensors, no end-of-sequence token)
and returns samples:

    generate_fn(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed)
        -> n_samples continuations of prompt (lists of >= n_tokens token ids)

The oracle loads the same folders into minibass and enumerates the exact distribution of the
first ``n_tokens`` tokens of plain autoregressive sampling from the target
(``minibass.exact.autoregressive_distribution``). Speculative decoding is exact iff the samples
follow it; the joint and each position's marginal are G-tested at alpha / m (Bonferroni).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from ..sampling import SamplingParams
from . import stats
from .verdict import Verdict

VOCAB = 6
PROMPT = [1, 4, 2]


def write_pair(folder: str | Path, seed: int = 0, head_dim: int = 8) -> tuple[Path, Path]:
    """Write the oracle's tiny target and draft (Llama, float32 safetensors) into folder/target, folder/draft.

    Two layers, two query heads and one kv head of ``head_dim`` (8 by default; GPU engines whose
    attention kernels need 64 or 128 take ``head_dim=64``). The draft is the target with noise added
    to every weight, so the two disagree often enough that rejections, residual draws and bonus
    tokens all happen.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=2 * head_dim, intermediate_size=4 * head_dim,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(seed)
    target = LlamaForCausalLM(config).eval()
    draft = LlamaForCausalLM(config).eval()
    std = 0.6 * (8 / head_dim) ** 0.5  # wide logits: distributions far from uniform, at any width
    with torch.no_grad():
        for t, d in zip(target.parameters(), draft.parameters()):
            if t.dim() == 2:
                t.normal_(0, std)
            d.copy_(t + (2 / 3 * std * torch.randn_like(t) if t.dim() == 2 else 0))
    paths = folder / "target", folder / "draft"
    for model, path in zip((target, draft), paths):
        model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=None, pad_token_id=0)
        model.save_pretrained(path, safe_serialization=True)
        (path / "oracle.json").write_text(json.dumps({"about": "minibass oracle probe model", "seed": seed}) + "\n")
    return paths


def exact_distribution(target_dir: Path, prompt: list[int], n_tokens: int, sampling: SamplingParams) -> dict:
    """{token tuple: probability} of the target's first n_tokens, by enumeration (float64)."""
    from .. import exact, load_model

    model = load_model(target_dir, dtype=torch.float64)
    return stats.table_events(exact.autoregressive_distribution(model, prompt, n_tokens, sampling))


def check_generator(generate_fn, *, n_tokens: int = 3, samples: int = 20_000, sampling: SamplingParams = SamplingParams(),
                    alpha: float = 1e-6, seed: int = 0, name: str | None = None, head_dim: int = 8) -> Verdict:
    """Sample ``samples`` continuations from ``generate_fn`` and test them against the exact distribution.

    ``head_dim``: of the oracle's pair (``write_pair``); 64 for engines whose kernels need it.
    """
    if n_tokens < 1 or samples < 10:
        raise ValueError(f"need n_tokens >= 1 and samples >= 10, got {n_tokens} and {samples}")
    if not isinstance(sampling, SamplingParams):
        raise ValueError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    started = time.perf_counter()
    verdict = Verdict(f"generator {name or getattr(generate_fn, '__qualname__', repr(generate_fn))}")
    with tempfile.TemporaryDirectory() as folder:
        target_dir, draft_dir = write_pair(folder, seed, head_dim)
        exact = exact_distribution(target_dir, PROMPT, n_tokens, sampling)
        generated_at = time.perf_counter()
        try:
            outputs = generate_fn(target_dir, draft_dir, list(PROMPT), n_tokens, samples, sampling, seed)
        except Exception as e:
            verdict.add("runs", "a call on the oracle's pair", float("inf"), 0, detail=f"raised {type(e).__name__}: {e}")
            verdict.seconds = time.perf_counter() - started
            return verdict
        engine_seconds = time.perf_counter() - generated_at
    short = [o for o in outputs if len(o) < n_tokens]
    verdict.add("continuations returned", f"continuations with >= {n_tokens} tokens, of {samples} asked",
                len(outputs) - len(short), samples, rule=">=",
                detail=f"{len(short)} shorter than {n_tokens} tokens, e.g. {list(short[0])}" if short else "")
    observed = Counter(tuple(int(t) for t in o[:n_tokens]) for o in outputs if len(o) >= n_tokens)
    level = alpha / (n_tokens + 1)
    possible, impossible = stats.split_impossible(observed, exact)
    first = next(iter(impossible), None)
    verdict.add("impossible sequences", "samples the target can never produce", sum(impossible.values()), 0,
                detail=f"{first} seen {impossible[first]} times" if impossible else "")
    joint = stats.g_test(possible, exact)
    verdict.add_g_test("joint G-test", joint, level, what=f"first {n_tokens} tokens, ")
    for j in range(n_tokens):
        coarse_exact, coarse_observed = stats.marginal_events(exact, observed, j)
        verdict.add_g_test(f"token {j + 1} marginal", stats.g_test(
            stats.split_impossible(coarse_observed, coarse_exact)[0], coarse_exact), level)
    n = sum(observed.values())
    verdict.notes.append(f"{n:,} samples, vocab {VOCAB}, prompt {PROMPT}, {sampling}; each test at alpha / "
                         f"{n_tokens + 1} = {level:.2g}; smallest total variation of the joint caught with probability "
                         f"0.99: {stats.detectable_tv(max(n, 1), joint.dof, level):.3f}; the engine took {engine_seconds:.1f} s")
    verdict.seconds = time.perf_counter() - started
    return verdict
