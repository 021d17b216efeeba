"""``check_generator``: a whole speculative generator, end to end, against the exact distribution.

The engine under test gets two Hugging Face folders the oracle writes (a tiny Llama target and
a draft over a vocabulary of ``VOCAB`` tokens, float32 safetensors, no end-of-sequence token)
and returns samples:

    generate_fn(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed)
        -> n_samples continuations of prompt (lists of >= n_tokens token ids)

Speculative decoding is exact iff every token follows the target's (warped) distribution given
the prompt and the tokens before it. The oracle loads the target into minibass (float64) and
computes, by teacher forcing, that distribution at every position of every distinct sample
(``next_token_logits``, ``reference_probs``). A token that greedy, top-k or top-p leaves out by
less than ``CUTOFF_BAND`` (``near_a_cutoff``), which an engine computing in float32 may keep, is
not impossible: after each prefix where the engine emitted one, the reference keeps it too.
Three kinds of test, each at alpha / m (Bonferroni, m = n_tokens + 2):

* the joint of the first ``JOINT_TOKENS`` tokens against its exact distribution, enumerated over
  all V^3 continuations (a G-test over up to 216 cells);
* for each position j = 1..n_tokens, the pairs (token j - 1, token j) against the counts the
  target's conditionals predict for the very prefixes sampled: expected[a, b] = sum over samples
  with token j - 1 = a of p(b | prompt, tokens < j). This reaches any position at a cost linear in
  n_tokens, and sees a token drawn from the wrong context (e.g. a bonus token drawn from p_k
  instead of p_{k+1}, which ignores the token before it). Given its prefix, each sample's token is
  one draw from its own p; the counts then vary at most as much as multinomial counts with the
  same expectation (the p differ from sample to sample, and the tokens before fix each row's
  total), so the G-test's chi-square threshold is conservative: a correct engine fails it with
  probability at most alpha / m (``tests/test_oracle.py`` finds 1 % of its p-values below 0.05);
* repeats (``stats.repeat_test``): the samples must be independent draws. An engine that seeds every
  batch alike returns each continuation several times, each one distributed as it should be, which
  the tests above can miss; more samples equal an earlier one than independent draws allow. A
  martingale test, valid at any size; one-sided: a distribution more concentrated than the target's
  fails it too. It sees samples returned twice only where not nearly all samples repeat by chance:
  at 8 tokens here (77 % do), not at 3 (97 % do). Where it passes, the verdict tries whether it
  could have failed (``_repeats_seen``) and says so in a note where not.

An engine drafting k tokens emits its first bonus token at position k + 1 (when all k drafts are
accepted), so ``n_tokens`` must exceed the draft length for the bonus token to be tested: the
default 3 reaches it for draft lengths up to 2; ``n_tokens=8`` covers draft lengths up to 7.
The draft (``DRAFT_NOISE``) is far enough from the target that about one draft token in four is
rejected (residual draws happen often) and close enough that a round of k = 7 drafts is accepted
whole about one time in five (bonus tokens happen often).
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from ..sampling import SamplingParams, is_int, probs
from . import stats
from .verdict import Verdict, raised

VOCAB = 6
PROMPT = [1, 4, 2]
JOINT_TOKENS = 3  # the joint of the first tokens is enumerated: VOCAB ** 3 = 216 cells
DRAFT_NOISE = 0.05  # the draft's weights: the target's plus noise of this std relative to theirs (see write_pair)
MAX_POSITIONS = 64  # the pair's context length: the prompt and up to 61 tokens


def write_pair(folder: str | Path, seed: int = 0, head_dim: int = 8,
               draft_noise: float = 2 / 3) -> tuple[Path, Path]:
    """Write a tiny target and draft (Llama, float32 safetensors) into folder/target, folder/draft.

    Two layers, two query heads and one kv head of ``head_dim`` (8 by default; GPU engines whose
    attention kernels need 64 or 128 take ``head_dim=64``). The draft is the target with noise of
    std ``draft_noise`` (relative to the weights') added to every weight matrix: with the default 2/3
    about seven draft tokens in ten are rejected; ``check_generator`` uses ``DRAFT_NOISE``, with which
    about one in four is, so that runs of accepted drafts reach the bonus token.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=2 * head_dim, intermediate_size=4 * head_dim,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=MAX_POSITIONS,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # the caller's global random state is left as it was
        torch.default_generator.manual_seed(seed)  # the CPU's only: torch.manual_seed would reseed CUDA's too
        target = LlamaForCausalLM(config).eval()
        draft = LlamaForCausalLM(config).eval()
        std = 0.6 * (8 / head_dim) ** 0.5  # wide logits: distributions far from uniform, at any width
        for t, d in zip(target.parameters(), draft.parameters()):
            if t.dim() == 2:
                t.normal_(0, std)
            d.copy_(t + (draft_noise * std * torch.randn_like(t) if t.dim() == 2 else 0))
    from transformers.utils import logging as hf_logging

    paths = folder / "target", folder / "draft"
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # two tiny files: no "Writing model shards" bars in the verdict's output
    try:
        for model, path in zip((target, draft), paths):
            model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=None, pad_token_id=0)
            model.save_pretrained(path, safe_serialization=True)
            (path / "oracle.json").write_text(json.dumps({"about": "minibass oracle probe model", "seed": seed}) + "\n")
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return paths


def next_token_logits(model, continuations: np.ndarray, batch: int = 4096) -> torch.Tensor:
    """[U, n, V] (the model's dtype): the model's logits for token j of each continuation [U, n] given
    ``PROMPT`` and the tokens before it, by teacher forcing (one forward pass per ``batch`` continuations)."""
    n = continuations.shape[1]
    length = len(PROMPT) + n - 1  # the last token is predicted, never read
    out = []
    for chunk in np.array_split(continuations, max(1, -(-len(continuations) // batch))):
        prompts = torch.tensor(PROMPT).expand(len(chunk), -1)
        tokens = torch.cat([prompts, torch.as_tensor(chunk[:, :-1])], 1)  # (B, L)
        cache = model.init_cache(len(chunk), length)
        logits = model.forward(tokens.reshape(-1), torch.full((len(chunk),), length), cache)  # (B * L, V)
        out.append(logits.view(len(chunk), length, -1)[:, len(PROMPT) - 1:])  # (B, n, V)
    return torch.cat(out)


def next_token_probs(model, continuations: np.ndarray, sampling: SamplingParams, batch: int = 4096) -> np.ndarray:
    """P [U, n, V] (float64 for the oracle's float64 target): the model's warped distribution of token j of
    each continuation [U, n] given ``PROMPT`` and the tokens before it (``next_token_logits``)."""
    return probs(next_token_logits(model, continuations, batch), sampling).numpy()


CUTOFF_BAND = 1e-5  # how near a cutoff a token left out by greedy, top-k or top-p may be and still be excused


def near_a_cutoff(logits: torch.Tensor, token: int, sampling: SamplingParams) -> bool:
    """Whether ``token``, which ``probs(logits, sampling)`` leaves out (logits [V], float64), misses being kept
    by at most ``CUTOFF_BAND``: its logit that close to greedy's maximum or to top-k's k-th largest logit
    (relative to the logit's size), and, with it kept by top-k, the mass of the tokens more likely than it
    reaching top_p by at most that much. An engine computing in float32 (or in another order) may keep it.
    A token of probability 0 before any cutoff (a logit of -inf) is never excused."""
    def close(gap, logit):
        return bool(gap <= CUTOFF_BAND * (1 + abs(float(logit))))

    if not torch.isfinite(logits[token]):
        return False
    if sampling.greedy:
        return close(logits.max() - logits[token], logits.max())
    allowed = torch.ones_like(logits, dtype=torch.bool)
    if 0 < sampling.top_k < len(logits):
        kth = logits.topk(sampling.top_k).values[-1]  # (temperature scales every logit alike: same order)
        if logits[token] < kth and not close(kth - logits[token], kth):  # left out by top-k, clearly
            return False
        allowed = (logits >= kth) | (torch.arange(len(logits)) == token)  # top-k's set, with the token
    if sampling.top_p >= 1:
        return True
    z = torch.where(allowed, (logits - logits.max()) / sampling.temperature, float("-inf"))
    p = torch.softmax(z, -1)  # the distribution top-p cuts, the token kept by top-k
    earlier = (p > p[token]) | ((p == p[token]) & (torch.arange(len(p)) < token))  # ranked before it
    return bool(p[earlier].sum() - sampling.top_p <= CUTOFF_BAND)


def reference_probs(logits: torch.Tensor, continuations: np.ndarray, sampling: SamplingParams,
                    widened: dict | None = None) -> np.ndarray:
    """P [U, n, V]: ``probs`` of the logits [U, n, V] (``next_token_logits`` of ``continuations`` [U, n]), where
    ``widened`` ({prefix tuple: tokens}) names tokens a cutoff left out by a hair after that prefix and the
    engine emitted there: after such a prefix the engine keeps them, so the reference does too (softmax over
    the kept tokens and them; greedy: the emitted token, the engine's own near-tie)."""
    conditional = probs(logits, sampling).numpy()
    for (u, j) in np.ndindex(*continuations.shape) if widened else ():
        tokens = widened.get(tuple(continuations[u, :j].tolist()))
        if tokens:
            row = torch.zeros(logits.shape[-1], dtype=torch.float64)
            if sampling.greedy:
                row[sorted(tokens)] = 1.0
            else:
                kept = torch.as_tensor(conditional[u, j] > 0)
                kept[sorted(tokens)] = True
                row = torch.where(kept, probs(logits[u, j], SamplingParams(sampling.temperature)), 0.0)
            conditional[u, j] = (row / row.sum()).numpy()
    return conditional


def chosen_probs(conditional: np.ndarray, continuations: np.ndarray) -> np.ndarray:
    """[U, n]: the probability of each continuation's own token j, from ``next_token_probs``' [U, n, V]."""
    return np.take_along_axis(conditional, continuations[..., None], -1)[..., 0]


def exact_distribution(model, n_tokens: int, sampling: SamplingParams, widened: dict | None = None) -> dict:
    """{token tuple: probability} of the target's first n_tokens: over all VOCAB ** n_tokens continuations,
    the product of their tokens' conditional probabilities (zero cells left out); ``widened``: as for
    ``reference_probs``."""
    every = np.array(list(itertools.product(range(VOCAB), repeat=n_tokens)))  # (V^n, n)
    p = chosen_probs(reference_probs(next_token_logits(model, every), every, sampling, widened), every).prod(1)
    return {tuple(e): float(pr) for e, pr in zip(every.tolist(), p) if pr > 0}


def check_generator(generate_fn, *, n_tokens: int = 3, samples: int = 20_000,
                    sampling: SamplingParams = SamplingParams(), alpha: float = 1e-6, seed: int = 0,
                    name: str | None = None, head_dim: int = 8) -> Verdict:
    """Sample ``samples`` continuations from ``generate_fn`` and test them against the exact distribution.

    ``generate_fn(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed)`` returns ``n_samples``
    continuations of ``prompt`` (lists of at least ``n_tokens`` token ids) from the engine under test, which
    loads the two folders the oracle wrote. ``n_tokens`` must exceed the engine's draft length for its bonus
    token to be tested (the module docstring says why).
    ``head_dim``: of the oracle's pair (``write_pair``); 64 for engines whose kernels need it.
    """
    from ..loading import load_model

    longest = MAX_POSITIONS - len(PROMPT)
    if not is_int(n_tokens) or not is_int(samples) or not 1 <= n_tokens <= longest or samples < 10:
        raise ValueError(f"need ints 1 <= n_tokens <= {longest} and samples >= 10, got {n_tokens!r} and {samples!r}")
    if not isinstance(sampling, SamplingParams):
        raise ValueError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be an even int >= 2 (rotary embeddings rotate pairs), got {head_dim!r}")
    stats.check_alpha(alpha)
    stats.check_call(generate_fn, seed)
    started = time.perf_counter()
    verdict = Verdict(f"generator {name or getattr(generate_fn, '__qualname__', repr(generate_fn))}")
    with tempfile.TemporaryDirectory() as folder:
        target_dir, draft_dir = write_pair(folder, seed, head_dim, DRAFT_NOISE)
        target = load_model(target_dir, dtype=torch.float64)
        generated_at = time.perf_counter()
        try:
            outputs = generate_fn(target_dir, draft_dir, list(PROMPT), n_tokens, samples, sampling, seed)
        except Exception as e:
            verdict.add("runs", "a call on the oracle's pair", float("inf"), 0, detail=raised(e))
            verdict.seconds = time.perf_counter() - started
            return verdict
        engine_seconds = time.perf_counter() - generated_at
    rows, problem = _token_lists(outputs, samples, n_tokens)
    if problem:
        verdict.add("output", f"a list of {samples} lists of token ids in [0, {VOCAB})", float("inf"), 0,
                    detail=problem)
    else:
        _test_samples(verdict, target, rows, samples, n_tokens, sampling, alpha)
        head = PROMPT[:n_tokens]  # as much of the prompt as the rows hold
        if not verdict.ok and rows and all(r[:len(head)] == head for r in rows):  # a likely cause
            verdict.notes.append(f"every continuation starts with {'the prompt ' if head == PROMPT else ''}{head}"
                                 f"{'' if head == PROMPT else f', the start of the prompt {PROMPT}'}: return the "
                                 "new tokens only, without the prompt")
        verdict.notes.append(f"the engine took {engine_seconds:.1f} s")
        if sampling.temperature == 1 and sampling.top_k == 0 and sampling.top_p == 1:
            verdict.notes.append("at temperature 1 without top-k or top-p, warping is the identity: an engine that "
                                 "warps wrongly (one side only, or q from the raw logits) passes here; run again "
                                 "with warping too, e.g. --temperature 0.7 --top-k 4 --top-p 0.9")
        if all(len(r) >= n_tokens for r in rows):  # else the rows too short come first
            verdict.notes.append(f"n_tokens = {n_tokens}: an engine's first bonus token comes at position k + 1, so "
                                 f"this run reaches the bonus tokens of draft lengths k <= {n_tokens - 1} only (for "
                                 "an engine that drafts more, give n_tokens > its k)")
    verdict.seconds = time.perf_counter() - started
    return verdict


def _test_samples(verdict: Verdict, target, rows: list[list[int]], samples: int, n_tokens: int,
                  sampling: SamplingParams, alpha: float) -> None:
    """The rows of the verdict for well-formed samples (see the module's docstring)."""
    short = [r for r in rows if len(r) < n_tokens]
    verdict.add("continuations returned", f"continuations with >= {n_tokens} tokens, of {samples} asked",
                len(rows) - len(short), samples, rule=">=",
                detail=f"{len(short)} shorter than {n_tokens} tokens, e.g. {short[0]}" if short else "")
    observed = Counter(tuple(r) for r in rows if len(r) >= n_tokens)
    if not observed:
        return
    sequences = np.array(list(observed))  # (U, n) the distinct continuations
    counts = np.array(list(observed.values()))  # (U,)
    logits = next_token_logits(target, sequences)  # (U, n, V)
    conditional = reference_probs(logits, sequences, sampling)  # (U, n, V)
    widened = _near_cutoffs(logits, sequences, chosen_probs(conditional, sequences), sampling)  # {prefix: tokens}
    if widened:  # tokens kept by a hair: the reference keeps them too, after those prefixes
        conditional = reference_probs(logits, sequences, sampling, widened)
    excused = np.array([any(int(s[j]) in widened.get(tuple(s[:j].tolist()), ()) for j in range(len(s)))
                        for s in sequences])  # (U,)
    p_token = chosen_probs(conditional, sequences)  # (U, n)
    impossible = (p_token == 0).any(1)  # (U,)
    verdict.add("impossible sequences", "samples the target can never produce", int(counts[impossible].sum()), 0,
                detail=_impossible_words(sequences[impossible], counts[impossible], p_token[impossible]))
    if excused.any():
        verdict.notes.append(
            f"{int(counts[excused].sum())} samples hold a token that the oracle's float64 target leaves out, but by "
            f"less than {CUTOFF_BAND:g} (its logit that close to the cutoff of greedy or top-k, or the mass of the "
            "more likely tokens reaching top_p by that little), where an engine computing in float32 may keep it. "
            f"After the {len(widened)} prefix{'es' * (len(widened) != 1)} where the engine emitted such a token, the "
            "tests below take the target to keep it, as the engine did; e.g. "
            + ", ".join(f"{list(prefix)} -> {sorted(tokens)}" for prefix, tokens in list(widened.items())[:3]))
    rows = [r for r in rows if len(r) >= n_tokens]
    sequences, counts, conditional = sequences[~impossible], counts[~impossible], conditional[~impossible]
    p_token = p_token[~impossible]
    if not len(counts):
        return
    m = n_tokens + 2  # the joint, one test per position, and the repeats
    level = alpha / m
    repeats_note = _test_repeats(verdict, target, rows, sequences, counts, p_token.prod(1), sampling, level)
    n_joint = min(n_tokens, JOINT_TOKENS)
    firsts = Counter()
    for sequence, count in zip(sequences[:, :n_joint].tolist(), counts.tolist()):
        firsts[tuple(sequence)] += count
    exact = exact_distribution(target, n_joint, sampling, widened)
    joint = stats.g_test(firsts, exact)
    later = " (every token, pair by pair: the rows below)" if n_joint < n_tokens else ""
    verdict.add_g_test("joint G-test", joint, level, what=f"first {n_joint} tokens together{later}, total variation "
                       f"{stats.total_variation(exact, firsts):.4f}; ",
                       detail=stats.worst_cells(exact, firsts, words=lambda e: f"tokens {e}"))
    for j in range(n_tokens):
        expected, seen = pair_counts(sequences, counts, conditional, j)
        before = f"token {j}" if j else "the prompt's last token"
        verdict.add_g_test(f"token {j + 1} | token {j}" if j else "token 1 | prompt", stats.g_test(seen, expected),
                           level, what="pairs (token before, token) vs the target's conditionals, ",
                           detail=stats.worst_cells(expected, seen, words=lambda c, before=before, j=j:
                                                    f"{before} = {c[0]}, token {j + 1} = {c[1]}"))
    n = int(counts.sum())
    verdict.notes.append(f"{n:,} samples, vocab {VOCAB}, prompt {PROMPT}, {sampling}; each test at alpha / {m} = "
                         f"{level:.2g}; smallest total variation of the joint caught with probability 0.99: "
                         f"{stats.detectable_tv(n, joint.dof, level):.3f}")
    if repeats_note:
        verdict.notes.append(repeats_note)


def _near_cutoffs(logits: torch.Tensor, sequences: np.ndarray, p_token: np.ndarray, sampling: SamplingParams) -> dict:
    """{prefix tuple: tokens}: the tokens of probability 0 the samples hold that a cutoff left out by less than
    ``CUTOFF_BAND`` (``near_a_cutoff``), by the prefix they follow. logits [U, n, V] of ``sequences`` [U, n]."""
    widened: dict = {}
    for u, j in zip(*np.nonzero(p_token == 0)):
        token = int(sequences[u, j])
        if near_a_cutoff(logits[u, j].double(), token, sampling):
            widened.setdefault(tuple(sequences[u, :j].tolist()), set()).add(token)
    return widened


def _impossible_words(sequences: np.ndarray, counts: np.ndarray, p_token: np.ndarray) -> str:
    """The impossible sequence seen most often, how often, and where its first impossible token is."""
    if not len(counts):
        return ""
    worst = int(np.argmax(counts))
    seen, others = int(counts[worst]), len(counts) - 1
    at = int(np.argmax(p_token[worst] == 0))  # the first position whose token the target never emits there
    return (f"{tuple(sequences[worst].tolist())} seen {seen} time{'s' * (seen != 1)}: token "
            f"{int(sequences[worst][at])} at position {at + 1} has probability 0 there"
            + (f"; {others} other impossible sequence{'s' * (others != 1)} seen" if others else ""))


def _test_repeats(verdict: Verdict, target, rows: list[list[int]], sequences: np.ndarray, counts: np.ndarray,
                  probability: np.ndarray, sampling: SamplingParams, level: float) -> str:
    """The row "repeated continuations": are the samples independent draws? (``stats.repeat_test``)
    ``rows``: the samples in the engine's order; ``sequences`` [U, n], ``counts`` [U] and ``probability`` [U]:
    the possible distinct ones, how often each was returned and its exact probability. Returns a note, or '':
    where the row passed, whether it could have seen samples returned twice at all (``_repeats_seen``)."""
    index = {tuple(s): i for i, s in enumerate(sequences.tolist())}
    ids = np.array([index[tuple(r)] for r in rows if tuple(r) in index])  # (n,) impossible samples left out
    test = stats.repeat_test(ids, probability, level)
    n = len(ids)
    excess = counts / (n * probability)  # how many times more often than expected
    worst = int(np.argmax(np.where(counts > 1, excess, 0)))
    surplus = test.repeats - test.expected
    detail = (f"{surplus:+,.1f} repeats ({surplus / max(test.sd, 1e-12):+.1f} sd of independent draws): the "
              "samples are not independent draws (is every batch or request seeded alike?) or come from a "
              "distribution more concentrated than the target's (see the other rows). "
              f"Returned most often for its probability: {tuple(sequences[worst].tolist())}, {counts[worst]} times, "
              f"expected {n * probability[worst]:.3g}")
    verdict.add("repeated continuations", f"samples equal to an earlier one, in random order; their chances of that "
                f"add up to {test.expected:,.1f}", test.repeats, test.threshold, rule="<", passed=test.passed(level),
                detail=detail)
    if not test.passed(level) or n < 2:
        return ""
    return _repeats_seen(target, n, sequences.shape[1], sampling, level, test.expected / n)


REPEAT_TRIALS = 5  # how many times the verdict tries whether its repeats row could see samples returned twice


def _repeats_seen(target, n: int, n_tokens: int, sampling: SamplingParams, level: float, by_chance: float) -> str:
    """A note, or '': could the repeats row have seen the commonest such bug? ``REPEAT_TRIALS`` trials, each
    n // 2 independent samples of the target (minibass's, from the float64 target) returned twice. Not the
    engine's own samples: they may be repeats already."""
    from ..generate import generate

    caught, certain = 0, True
    for trial in range(REPEAT_TRIALS):
        half = np.array(generate(target, [list(PROMPT)] * (n // 2), n_tokens, sampling=sampling,
                                 seed=1 + trial).tokens)  # (n // 2, n_tokens)
        distinct, half_ids = np.unique(half, axis=0, return_inverse=True)
        p_half = chosen_probs(next_token_probs(target, distinct, sampling), distinct).prod(1)  # (distinct,)
        twice = stats.repeat_test(np.concatenate([half_ids.ravel()] * 2), p_half, level)
        caught += not twice.passed(level)
        certain &= bool(p_half.min() > 1 - 1e-9)
    if caught == REPEAT_TRIALS:
        return ""
    if certain:
        return ("one continuation has all the probability here (e.g. greedy), so samples cannot show whether they are "
                "independent: the repeated-continuations row tests nothing")
    tokens = f"{n_tokens} token{'s' * (n_tokens != 1)}"
    sees = "cannot see samples returned twice" if not caught else "catches samples returned twice only at times"
    return (f"the repeated-continuations row {sees} here (e.g. two batches seeded alike): {n // 2:,} independent "
            f"samples of the target, each returned twice, failed it in {caught} of {REPEAT_TRIALS} trials. At {tokens} "
            f"{by_chance:.0%} of the samples repeat an earlier one by chance; a larger n_tokens makes such repeats "
            "rarer, and duplicates visible")


def pair_counts(sequences: np.ndarray, counts: np.ndarray, conditional: np.ndarray, j: int) -> tuple[dict, Counter]:
    """The view of position j (0-based) that ``check_generator`` G-tests, for distinct samples
    ``sequences`` [U, n] seen ``counts`` [U] times with conditionals [U, n, V] (``next_token_probs``):
    (expected, observed) pairs (token j - 1, token j), the prompt's last token standing before token 0;
    expected[a, b] = sum over samples whose token j - 1 is a of p(b | their prefix), as a distribution."""
    before = sequences[:, j - 1] if j else np.full(len(sequences), PROMPT[-1])  # (U,)
    expected = np.zeros((VOCAB, VOCAB))
    np.add.at(expected, before, counts[:, None] * conditional[:, j])  # (V, V)
    seen = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    np.add.at(seen, (before, sequences[:, j]), counts)
    cells = [(a, b) for a in range(VOCAB) for b in range(VOCAB)]
    return ({c: expected[c] / counts.sum() for c in cells if expected[c] > 0},
            Counter({c: int(seen[c]) for c in cells if seen[c]}))


def _token_lists(outputs, samples: int, n_tokens: int) -> tuple[list[list[int]], str]:
    """The engine's continuations as lists of ints, and '' or what is wrong with them (their first
    ``n_tokens`` must be integer token ids in the vocabulary)."""
    expected = f"expected a list of {samples} continuations, each a list of token ids"
    if torch.is_tensor(outputs) or isinstance(outputs, np.ndarray):
        outputs = outputs.tolist()
    if not isinstance(outputs, (list, tuple)):
        return [], f"returned {type(outputs).__name__}; {expected}"
    rows = []
    for i, row in enumerate(outputs):
        if torch.is_tensor(row) or isinstance(row, np.ndarray):
            row = row.tolist()
        if not isinstance(row, (list, tuple)):
            return [], f"continuation {i} is {row!r} ({type(row).__name__}); {expected}"
        for t in row[:n_tokens]:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                return [], f"continuation {i} holds {t!r} ({type(t).__name__}); token ids are integers"
            if not 0 <= t < VOCAB:
                return [], f"continuation {i} holds token id {t}, outside the vocabulary [0, {VOCAB})"
        rows.append([int(t) for t in row[:n_tokens]])
    if len(rows) > samples:  # (fewer fail the "continuations returned" row, which counts them)
        return [], f"returned {len(rows)} continuations, more than the {samples} asked; {expected}"
    return rows, ""
