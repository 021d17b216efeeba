"""Plain batched decoding: contract errors, EOS, seeds, batch invariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import minibass
from minibass import SamplingParams
from minibass.model import Decoder, ModelConfig

CONFIG = ModelConfig(vocab_size=11, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=4, max_position_embeddings=48)
PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 1]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Decoder(CONFIG).double().eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(20)  # peaked distributions
    return m


@pytest.mark.parametrize("args,kwargs,message", [
    (([], 3), {}, "prompts must be a non-empty list"),
    (([[1], []], 3), {}, "prompts\\[1\\] must be a non-empty"),
    (([[1, 99]], 3), {}, "outside \\[0, 11\\)"),
    (([[1]], -1), {}, "max_new_tokens must be an int >= 0"),
    (([[1]], 2.0), {}, "max_new_tokens"),
    (([[1] * 40], 9), {}, "exceeds the model's max_seq_len \\(48\\)"),
    (([[1]], 3), dict(attention="flash"), "attention must be one of"),
    (([[1]], 3), dict(seed=[1, 2]), "2 per-prompt seeds for 1 prompts"),
    (([[1]], 3), dict(sampling=0.5), "sampling must be a SamplingParams"),
    (([[1, True]], 3), {}, "prompts\\[0\\] must hold int token ids, got bool"),
    (([[1, 2.0]], 3), {}, "prompts\\[0\\] must hold int token ids, got float"),
    (([[1]], 3), dict(seed=-5), "seed must be None, an int in \\[0, 2\\*\\*63\\)"),
    (([[1]], 3), dict(seed=[2 ** 64]), "seed must be"),
    (([[1]], 3), dict(seed="7"), "seed must be"),
    (([[1]], 3), dict(eos_token_id="</s>"), "eos_token_id must be None, a token id or a list"),
    (([[1]], 3), dict(eos_token_id=11), "eos_token_id must be"),
    (([[1]], 3), dict(eos_token_id=[]), "eos_token_id must be"),
    (([[1]], 0), dict(attention="flash"), "attention must be one of"),  # checked even when nothing is decoded
])
def test_bad_requests_raise_value_error(model, args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        minibass.generate(model, *args, **{"attention": "naive", **kwargs})


def test_a_folder_path_is_not_taken_for_a_model():
    with pytest.raises(ValueError, match="expected a model with vocab_size, init_cache and forward"):
        minibass.generate("path/to/checkpoint", [[1]], 3)


class NonFinite(torch.nn.Module):
    """A model whose logits are ``value`` everywhere (NaN, or inf as after a float16 overflow)."""

    def __init__(self, model, value):
        super().__init__()
        self.model, self.value, self.vocab_size = model, value, model.vocab_size

    def init_cache(self, batch_size, capacity):
        return self.model.init_cache(batch_size, capacity)

    def forward(self, tokens, q_lens, cache, *, attention=None):
        return self.model(tokens, q_lens, cache, attention=attention).fill_(self.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_logits_raise_instead_of_giving_an_out_of_range_token(model, value):
    with pytest.raises(ValueError, match="NaN, infinite or all zero.*non-finite logits"):
        minibass.generate(NonFinite(model, value), [[1, 2]], 1, sampling=SamplingParams(temperature=1.0), seed=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_logits_raise_under_greedy_decoding_too(model, value):
    """Greedy decoding takes an argmax, which would return the index of a NaN (token 0) without a word."""
    broken, greedy = NonFinite(model, value), SamplingParams(temperature=0)
    with pytest.raises(ValueError, match="cannot decode greedily.*NaN or infinite.*non-finite logits"):
        minibass.generate(broken, [[1, 2]], 1, sampling=greedy)
    for target, draft in [(broken, model), (model, broken)]:  # the target's check, and the draft's
        with pytest.raises(ValueError, match="cannot decode greedily"):
            minibass.speculative_generate(target, draft, [[1, 2], [3]], 4, sampling=greedy, draft_length=2)
        with pytest.raises(ValueError, match="cannot (decode greedily|sample)"):  # the general phases, one-hot p and q
            minibass.speculative_generate(target, draft, [[1, 2], [3]], 4, sampling=greedy, draft_length=2,
                                          phases=minibass.speculative.Phases())


def test_a_tensor_of_prompts_is_refused_with_a_hint(model):
    with pytest.raises(ValueError, match=r"got a Tensor; for a 2-D Tensor of ids, one row per prompt: \[row.tolist"):
        minibass.generate(model, torch.tensor([[1, 2], [3, 4]]), 3)
    with pytest.raises(ValueError, match=r"got a ndarray; for a 2-D ndarray of ids"):
        minibass.generate(model, np.array([[1, 2], [3, 4]]), 3)
    # A list of rows that are tensors or arrays, as [tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
    for rows in ([[1, 2], torch.tensor([3, 4])], [np.array([1, 2])]):
        with pytest.raises(ValueError, match=r"prompts\[\d\] must be a list of token ids, got a (Tensor|ndarray): "
                                             r"pass row.tolist\(\)"):
            minibass.generate(model, rows, 3)


def test_the_length_limit_names_the_model_that_is_too_short(model):
    short = Decoder(ModelConfig(**{**CONFIG.__dict__, "max_position_embeddings": 20})).double().eval()
    with pytest.raises(ValueError, match=r"exceeds the draft's max_seq_len \(20\)"):
        minibass.speculative_generate(model, short, [[1] * 15], 9)
    with pytest.raises(ValueError, match=r"exceeds the target's max_seq_len \(20\)"):
        minibass.speculative_generate(short, model, [[1] * 15], 9)


def test_numpy_integer_budget(model):
    assert [len(t) for t in minibass.generate(model, PROMPTS, np.int64(3), attention="naive").tokens] == [3, 3, 3]


def test_lengths_and_eos(model):
    greedy = minibass.generate(model, PROMPTS, 9, sampling=SamplingParams(temperature=0), attention="naive")
    assert [len(t) for t in greedy.tokens] == [9, 9, 9]
    eos = greedy.tokens[2][4]  # a token sequence 2 emits at step 5
    stopped = minibass.generate(model, PROMPTS, 9, sampling=SamplingParams(temperature=0), attention="naive",
                                eos_token_id=eos)
    for full, cut in zip(greedy.tokens, stopped.tokens):
        expected = full[:full.index(eos) + 1] if eos in full else full
        assert cut == expected
    assert stopped.stats.acceptance_rate is None
    assert stopped.stats.target_calls == stopped.stats.steps == max(len(t) for t in stopped.tokens)
    assert minibass.generate(model, PROMPTS, 0, attention="naive").tokens == [[], [], []]


def test_several_eos_ids_and_numpy_token_ids(model):
    import numpy as np

    greedy = SamplingParams(temperature=0)
    full = minibass.generate(model, PROMPTS, 9, sampling=greedy, attention="naive").tokens
    a, b = full[0][3], full[2][2]  # each ends a different sequence
    for eos in ([a, b], (b, a), {a, b}, np.array([a, b]).tolist()):
        stopped = minibass.generate(model, PROMPTS, 9, sampling=greedy, attention="naive", eos_token_id=eos).tokens
        assert stopped == [t[:min([t.index(e) + 1 for e in (a, b) if e in t] or [9])] for t in full], eos
    as_numpy = [list(np.array(p, dtype=np.int64)) for p in PROMPTS]  # numpy ints, as from an array
    assert minibass.generate(model, as_numpy, 9, sampling=greedy, attention="naive").tokens == full
    # Unsigned and mixed NumPy ids too (torch cannot promote uint64 with int64), in both decoders.
    mixed = [[np.uint64(t) if i % 2 else np.int8(t) for i, t in enumerate(p)] for p in PROMPTS]
    assert minibass.generate(model, mixed, 9, sampling=greedy, attention="naive").tokens == full
    assert minibass.speculative_generate(model, model, mixed, 9, sampling=greedy, attention="naive").tokens == full


def test_plain_generate_counts_its_active_sequences_and_drafts_nothing(model):
    stats = minibass.generate(model, PROMPTS, 4, attention="naive", seed=0).stats
    assert stats.sequence_steps == stats.new_tokens == 4 * len(PROMPTS)
    assert stats.draft_calls == 0 and stats.draft_lengths == stats.accepted == stats.proposed == []
    assert stats.acceptance_rate is None and stats.mean_accepted is None


def test_a_tiny_temperature_tends_to_greedy_instead_of_nan(model):
    logits = torch.tensor([[1.0, 2.0, 3.0], [5.0, -1.0, 5.0]], dtype=torch.float64)
    p = minibass.sampling.probs(logits, SamplingParams(temperature=1e-300))
    assert torch.equal(p, torch.tensor([[0, 0, 1.0], [0.5, 0, 0.5]], dtype=torch.float64))  # ties share
    greedy = minibass.generate(model, PROMPTS, 6, sampling=SamplingParams(temperature=0), attention="naive")
    tiny = minibass.generate(model, PROMPTS, 6, sampling=SamplingParams(temperature=1e-300), seed=0, attention="naive")
    assert tiny.tokens == greedy.tokens


def test_same_seed_same_tokens_and_different_seed_differs(model):
    run = lambda seed: minibass.generate(model, PROMPTS * 4, 8, seed=seed, attention="naive").tokens  # noqa: E731
    assert run(5) == run(5)
    assert run(5) != run(6)


def test_per_prompt_seed_makes_output_independent_of_the_batch(model):
    alone = minibass.generate(model, [PROMPTS[1]], 10, seed=[1234], attention="naive").tokens[0]
    for others in ([PROMPTS[0]], [PROMPTS[2], PROMPTS[0], PROMPTS[2]]):
        batch = others + [PROMPTS[1]]
        seeds = list(range(len(others))) + [1234]
        together = minibass.generate(model, batch, 10, seed=seeds, attention="naive").tokens[-1]
        assert together == alone


def test_greedy_is_batch_invariant(model):
    greedy = SamplingParams(temperature=0)
    together = minibass.generate(model, PROMPTS, 8, sampling=greedy, attention="naive").tokens
    for prompt, tokens in zip(PROMPTS, together):
        assert minibass.generate(model, [prompt], 8, sampling=greedy, attention="naive").tokens[0] == tokens


def test_stats_count_what_was_emitted_when_sequences_stop_early(model):
    greedy = SamplingParams(temperature=0)
    full = minibass.generate(model, PROMPTS, 9, sampling=greedy, attention="naive").tokens
    eos = full[2][4]
    stopped = minibass.generate(model, PROMPTS, 9, sampling=greedy, attention="naive", eos_token_id=eos)
    assert sum(map(len, stopped.tokens)) < 27
    assert stopped.stats.new_tokens == stopped.stats.sequence_steps == sum(map(len, stopped.tokens))
    assert stopped.stats.wall_time > 0 and stopped.stats.tokens_per_second > 0


def test_sampled_sequences_keep_their_own_streams_when_others_stop(model):
    """seed per sequence: stopping one sequence at EOS must not change the tokens the others sample."""
    kw = dict(seed=[11, 12, 13], attention="naive", sampling=SamplingParams(temperature=1.0))
    full = minibass.generate(model, PROMPTS, 9, **kw).tokens
    for eos in {full[0][1], full[1][1], full[2][1]}:
        cut = minibass.generate(model, PROMPTS, 9, eos_token_id=eos, **kw).tokens
        assert cut == [t[:t.index(eos) + 1] if eos in t else t for t in full], eos


def test_the_loops_run_their_models_under_inference_mode_and_forward_alone_returns_ordinary_tensors(model):
    """``generate`` and ``speculative_generate`` call the models under ``torch.inference_mode()`` (no autograd
    bookkeeping at all: cheaper on a CPU), return lists and leave the model's rotary tables ordinary tensors;
    ``Decoder.forward`` called on its own runs under ``no_grad`` only, so the logits it returns carry no graph
    and can be edited in place."""
    seen = []
    forward = Decoder.forward
    model.rope_cache = None  # built afresh inside the loops

    def recording(self, *args, **kwargs):
        seen.append(torch.is_inference_mode_enabled())
        return forward(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Decoder, "forward", recording)
        result = minibass.generate(model, PROMPTS, 3, seed=0)
        speculative = minibass.speculative_generate(model, model, PROMPTS, 3, seed=0, draft_length=2)
    assert seen and all(seen)
    assert all(type(t) is int for r in (result, speculative) for row in r.tokens for t in row)
    assert model.rope_cache is not None and not any(t.is_inference() for t in model.rope_cache)
    cache = model.init_cache(1, 8)
    logits = model.forward(torch.tensor([1, 2]), torch.tensor([2]), cache)
    assert not logits.is_inference() and not logits.requires_grad and not cache.lengths.is_inference()
    logits[:, 0] = float("-inf")  # an inference tensor would refuse this outside inference mode
