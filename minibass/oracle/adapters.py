"""Adapters: other engines' parts in the signatures the oracle checks.

* ``transformers_sampler``: transformers' own speculative rejection step
  (``transformers.generation.utils._speculative_sampling``) as ``rejection_sample``.
* ``transformers_given_uniforms``: the same function with its acceptance uniforms given
  (for ``check_given_uniforms``).
* ``transformers_generator``: transformers assisted generation (``generate(assistant_model=...)``)
  as a ``check_generator`` engine.
* ``minibass_generator``: minibass's own ``speculative_generate``, for comparison.

GPU-only engines (vLLM, SGLang) have recipes in ``scripts/`` instead (described in ``docs/oracle.md``):
they need CUDA, and minibass does not depend on them. ``gpu_engine_missing`` says why one cannot run here.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect

import torch

from ..sampling import SamplingParams


def _transformers_step():
    from transformers.generation import utils

    return utils._speculative_sampling


def _one_row(step, tokens, q, p):
    """Call transformers' step on one row. It takes logits and applies a softmax, so the adapter passes
    log-probabilities: softmax(log q) = q / sum(q) = q (zeros stay zeros as log 0 = -inf), which is
    lossless up to one rounding. Its inputs are batch 1: candidate_input_ids [1, k] (only the last k
    are read), candidate_logits [1, k, V], new_logits [1, k + 1, V]."""
    k = tokens.shape[0]
    extra = (False,) if "is_done_candidate" in inspect.signature(step).parameters else ()  # transformers < 4.57
    valid, n_matches = step(tokens[None], q.log()[None], k, p.log()[None], *extra)
    n = int(n_matches)
    return n, int(valid[0, n])  # valid = accepted drafts then the next token


@contextlib.contextmanager
def _one_thread():
    """Tiny per-row tensors: one intra-op thread is fastest, and does not fight other work for cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def transformers_sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
    """transformers' ``_speculative_sampling`` in ``rejection_sample``'s signature, one row at a time.

    It draws its uniforms with ``torch.rand_like`` and its next token with ``torch.multinomial``
    from the global CPU random state; given a ``generator``, the adapter seeds that state from it once,
    inside ``torch.random.fork_rng`` so the caller's CPU random state is restored afterwards.
    Probabilities are passed as log-probabilities (see ``_one_row``); float64 is kept.
    """
    step = _transformers_step()
    n_out, y_out = [], []
    seeded = generator is not None
    with torch.random.fork_rng(devices=[], enabled=seeded), _one_thread():
        if seeded:
            torch.default_generator.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
        for tokens, q, p in zip(draft_tokens, draft_probs.double(), target_probs.double()):
            n, y = _one_row(step, tokens, q, p)
            n_out.append(n)
            y_out.append(y)
    return torch.tensor(n_out), torch.tensor(y_out)


@contextlib.contextmanager
def _given_rand_like(values: torch.Tensor):
    """Within the block, ``torch.rand_like`` returns ``values`` (its uniforms, given)."""
    original = torch.rand_like
    torch.rand_like = lambda t, **kw: values.to(t.dtype).reshape(t.shape)
    try:
        yield
    finally:
        torch.rand_like = original


def transformers_given_uniforms(draft_tokens, draft_probs, target_probs, u_accept, u_next):
    """transformers' step with its acceptance uniforms given (``accept_and_resample``'s signature).

    ``_speculative_sampling`` draws its acceptance uniforms with one ``torch.rand_like`` call; the
    adapter substitutes ``u_accept`` for it during the call. Its next token comes from
    ``torch.multinomial``, so ``u_next`` is not used (the probe checks only that token's support).
    """
    step = _transformers_step()
    n_out, y_out = [], []
    for tokens, q, p, u in zip(draft_tokens, draft_probs.double(), target_probs.double(), u_accept):
        with _given_rand_like(u.double()):
            n, y = _one_row(step, tokens, q, p)
        n_out.append(n)
        y_out.append(y)
    return torch.tensor(n_out), torch.tensor(y_out)


@contextlib.contextmanager
def _without_transformers_own_deprecation():
    """Drops one warning that assisted generation raises against itself: its candidate generator calls the
    assistant's ``generate`` with a ``generation_config`` and keyword arguments together, which transformers
    5 calls deprecated ("Passing `generation_config` together with generation-related arguments"). Every
    other message gets through. (transformers logs it once per process, so a later assisted generation outside
    the adapter does not show it either.)"""
    import logging

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Passing `generation_config` together with generation-related")

    logger = logging.getLogger("transformers.generation.utils")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def transformers_generator(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling=SamplingParams(), seed=0, *,
                           draft_length: int = 3, **generate_kwargs):
    """transformers assisted generation as a ``check_generator`` engine: one ``generate`` call per
    sample (assisted generation takes batch 1), a fixed draft length (``num_assistant_tokens``
    with the constant schedule), sampling as ``sampling`` says; extra ``generate_kwargs`` pass
    through (e.g. ``assistant_ensemble_weight``)."""
    from transformers import AutoModelForCausalLM

    from ..loading import hf_dtype

    target = AutoModelForCausalLM.from_pretrained(target_dir, **hf_dtype(torch.float32)).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, **hf_dtype(torch.float32)).eval()
    draft.generation_config.num_assistant_tokens = draft_length
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0  # draft exactly draft_length tokens
    if sampling.greedy:
        options = dict(do_sample=False)
    else:
        options = dict(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or None,
                       top_p=sampling.top_p)
    ids = torch.tensor([prompt])
    outputs = []
    torch.manual_seed(seed)
    from tqdm import tqdm

    with torch.no_grad(), _without_transformers_own_deprecation():
        for _ in tqdm(range(n_samples), desc="transformers assisted generation", mininterval=5, leave=False):
            out = target.generate(ids, assistant_model=draft, max_new_tokens=n_tokens, min_new_tokens=n_tokens,
                                  pad_token_id=0, **options, **generate_kwargs)
            outputs.append(out[0, len(prompt):].tolist())
    return outputs


def minibass_generator(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling=SamplingParams(), seed=0, *,
                       draft_length=3, **kwargs):
    """minibass's ``speculative_generate`` as a ``check_generator`` engine: all samples as one ragged batch."""
    import minibass

    target, draft = minibass.load_model(target_dir), minibass.load_model(draft_dir)
    result = minibass.speculative_generate(target, draft, [list(prompt)] * n_samples, n_tokens, sampling=sampling,
                                           draft_length=draft_length, seed=seed, **kwargs)
    return result.tokens


def gpu_engine_missing(module: str) -> str | None:
    """Why a GPU-only engine (``"vllm"``, ``"sglang"``) cannot be checked here: its module does not import, or
    there is no CUDA device; None where both are present. The recipes in ``scripts/`` exit 3 on it rather than
    report a failing engine."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        return str(error)
    return None if torch.cuda.is_available() else "no CUDA device"
