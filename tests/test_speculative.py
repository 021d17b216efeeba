"""speculative_generate: greedy equality with generate, exact distributions end to end, planted bugs caught."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

import minibass
from minibass import SamplingParams, TableLM, exact, oracle, speculative
from minibass.draft_length import (BassDynamicDraftLength, CostAwareDraftLength, DraftCosts, FixedDraftLength,
                                   PerSequenceDynamicDraftLength, expected_tokens, make_policy)
from minibass.attention import triton_available
from minibass.generate import IDLE
from minibass.speculative import Phases
from minibass.model import Decoder, ModelConfig
from minibass.oracle import stats
from minibass.sampling import stream_seed
from conftest import hf_tiny

ALPHA = 1e-6
GREEDY = SamplingParams(temperature=0)
CONFIG = ModelConfig(vocab_size=11, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=4, max_position_embeddings=64)
PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 1], [2, 2]]


def decoder(seed, scale=20.0):
    torch.manual_seed(seed)
    model = Decoder(CONFIG).double().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)  # peaked distributions: long greedy runs, few near-ties
    return model


@pytest.fixture(scope="module")
def models():
    target = decoder(0)
    adversarial = decoder(0)
    with torch.no_grad():
        adversarial.lm_head.weight.neg_()  # its argmax is the target's argmin: greedy drafts always rejected
    return {"target": target, "self": target, "other": decoder(1, scale=5.0), "adversarial": adversarial}


# --- greedy: exactly the tokens of generate ---------------------------------------------------------

@pytest.mark.parametrize("attention", sorted(minibass.BACKENDS))
@pytest.mark.parametrize("draft_name", ["self", "other", "adversarial"])
def test_greedy_equals_generate(models, attention, draft_name):
    target, draft = models["target"], models[draft_name]
    ref = minibass.generate(target, PROMPTS, 10, sampling=GREEDY, attention="naive").tokens
    # The ragged kernel runs in Triton's interpreter here: one draft-length policy keeps it quick.
    for draft_length in ([1, 3, "dynamic", "per-sequence", "auto"] if attention != "ragged" else ["dynamic"]):
        result = minibass.speculative_generate(target, draft, PROMPTS, 10, sampling=GREEDY,
                                               draft_length=draft_length, attention=attention)
        assert result.tokens == ref, (draft_name, draft_length)
        rate = result.stats.acceptance_rate
        if draft_name == "self":
            assert rate == 1.0
        if draft_name == "adversarial":
            assert rate == 0.0


def test_several_eos_ids_end_sequences_as_in_generate(models):
    target, draft = models["target"], models["other"]
    full = minibass.generate(target, PROMPTS, 12, sampling=GREEDY).tokens
    eos = [full[0][3], full[2][5]]
    ref = minibass.generate(target, PROMPTS, 12, sampling=GREEDY, eos_token_id=eos).tokens
    assert ref != full
    for draft_length in (1, 4, "dynamic"):
        got = minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY, draft_length=draft_length,
                                            eos_token_id=eos)
        assert got.tokens == ref, draft_length
    with pytest.raises(ValueError, match="eos_token_id must be"):
        minibass.speculative_generate(target, draft, PROMPTS, 12, eos_token_id=[1, 11])


def test_every_eos_id_ends_sequences_as_in_generate(models):
    """Also ids the draft proposes and the target rejects: an EOS among rejected drafts ends nothing."""
    target, draft = models["target"], models["other"]
    for eos in range(CONFIG.vocab_size):
        ref = minibass.generate(target, PROMPTS, 12, sampling=GREEDY, eos_token_id=eos).tokens
        got = minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY, draft_length=4,
                                            eos_token_id=eos).tokens
        assert got == ref, eos


class Counting:
    """A model that records the q_lens of each of its forward calls (and otherwise is the model)."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def forward(self, tokens, q_lens, cache, **kwargs):
        self.calls.append(q_lens.tolist())
        return self.model.forward(tokens, q_lens, cache, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_finished_sequences_feed_nothing_to_the_target(models):
    target = Counting(models["target"])
    eos = minibass.generate(models["target"], PROMPTS, 12, sampling=GREEDY).tokens[1][1]
    result = minibass.speculative_generate(target, models["other"], PROMPTS, 12, sampling=GREEDY, draft_length=4,
                                           eos_token_id=eos)
    verifies = target.calls[1:]  # after the prefill
    assert len(verifies) == result.stats.steps
    for q_lens, accepted in zip(verifies, result.stats.accepted):
        assert [q == 0 for q in q_lens] == [n == IDLE for n in accepted]
    assert any(IDLE in row for row in result.stats.accepted)  # (some sequence did finish early)


def test_the_draft_catches_up_on_one_token_after_a_rejection_and_two_after_a_full_acceptance(models):
    """The first draft call of a step feeds each sequence what its cache lacks: the token the target
    added, and after a fully accepted draft also the last draft token, which the draft never saw.
    Idle sequences and those drafting nothing are fed nothing."""
    draft = Counting(models["other"])
    result = minibass.speculative_generate(models["target"], draft, PROMPTS, 12, sampling=GREEDY, draft_length=3)
    stats, calls = result.stats, iter(draft.calls[1:])  # after the prefill
    for t, k in enumerate(stats.draft_lengths):
        step_calls = [next(calls) for _ in range(k)]  # a step makes as many draft calls as its longest draft
        if not k:
            continue
        for b, q in enumerate(step_calls[0]):
            if stats.proposed[t][b] in (IDLE, 0):
                assert q == 0, (t, b)
            else:
                full = t > 0 and 0 < stats.proposed[t - 1][b] == stats.accepted[t - 1][b]
                assert q == (2 if full else 1), (t, b, q)
    assert next(calls, None) is None


def test_draft_calls_and_sequence_steps_count_what_happened(models):
    draft = Counting(models["other"])
    eos = minibass.generate(models["target"], PROMPTS, 12, sampling=GREEDY).tokens[1][1]
    stats = minibass.speculative_generate(models["target"], draft, PROMPTS, 12, sampling=GREEDY, draft_length=3,
                                          eos_token_id=eos).stats
    assert stats.draft_calls == len(draft.calls)  # the prefill and every draft call
    assert stats.sequence_steps == sum(n != IDLE for row in stats.accepted for n in row)
    assert stats.mean_accepted == stats.accepted_tokens / stats.sequence_steps


def test_sequences_that_proposed_nothing_do_not_take_part_in_the_update(models):
    """Contract section 5; minibass's policies filter them out themselves, a user's need not."""
    heard = []

    class Listening(FixedDraftLength):
        def update(self, active, proposed, accepted):
            heard.append(list(proposed))

    minibass.speculative_generate(models["target"], models["other"], PROMPTS, 7, sampling=GREEDY,
                                  draft_length=Listening(3))
    assert heard and all(k > 0 for proposed in heard for k in proposed)
    assert any(len(proposed) < len(PROMPTS) for proposed in heard)  # (budgets capped some drafts to 0)


def test_a_policy_answering_the_wrong_number_of_lengths_is_refused(models):
    class One(FixedDraftLength):
        def lengths(self, active):
            return [self.k]

    with pytest.raises(ValueError, match="one int >= 1 per active sequence"):
        minibass.speculative_generate(models["target"], models["other"], PROMPTS, 4, draft_length=One(2))


@pytest.mark.parametrize("draft_name", ["self", "other", "adversarial"])
def test_greedy_phases_are_the_rejection_rule_on_one_hot_distributions(models, draft_name):
    """Greedy decoding runs GREEDY_PHASES (tokens compared) by default; the general phases (one-hot p and q
    through the rejection step) must give the same tokens and accept the same drafts at every step, with
    ragged per-sequence lengths, EOS inside a draft and the budget cap."""
    target, draft = models["target"], models[draft_name]
    eos = minibass.generate(target, PROMPTS, 12, sampling=GREEDY).tokens[0][3]
    for draft_length in (1, 4, "per-sequence", "dynamic"):
        for eos_token_id in (None, eos):
            runs = [minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY,
                                                  draft_length=draft_length, eos_token_id=eos_token_id, phases=phases)
                    for phases in (None, Phases(), speculative.GREEDY_PHASES)]
            fast, general, explicit = runs
            assert fast.tokens == general.tokens == explicit.tokens, (draft_length, eos_token_id)
            assert fast.stats.accepted == general.stats.accepted, (draft_length, eos_token_id)
            assert fast.stats.draft_lengths == general.stats.draft_lengths


def test_stats_record_what_each_sequence_proposed(models):
    """``proposed[step][sequence]``: the sequence's own draft length, IDLE exactly where ``accepted`` is, never
    fewer than it accepted; the row's longest is the step's draft length, and the rows add up to proposed_tokens."""
    result = minibass.speculative_generate(models["target"], models["other"], PROMPTS, 12, sampling=GREEDY,
                                           draft_length="per-sequence")
    s = result.stats
    assert len(s.proposed) == len(s.accepted) == s.steps
    for proposed, accepted, longest in zip(s.proposed, s.accepted, s.draft_lengths):
        assert [k == IDLE for k in proposed] == [n == IDLE for n in accepted]
        assert all(n <= k for k, n in zip(proposed, accepted)) and max(proposed) == longest
    assert sum(k for row in s.proposed for k in row if k != IDLE) == s.proposed_tokens
    assert len({k for row in s.proposed for k in row if k != IDLE}) > 1  # per sequence: lengths differ


def test_the_default_phases_are_the_greedy_ones_only_for_greedy_decoding(models):
    target, draft = models["target"], models["other"]
    seen = []

    def recording_step(s, target, draft, draft_lens, sampling, streams, attention, eos_token_id, phases, timer):
        seen.append(phases)
        return speculative.step(s, target, draft, draft_lens, sampling, streams, attention, eos_token_id, phases, timer)

    for sampling, expected in ((GREEDY, speculative.GREEDY_PHASES), (SamplingParams(temperature=0.8), Phases())):
        seen.clear()
        minibass.speculative_generate(target, draft, PROMPTS, 6, sampling=sampling, seed=0, step=recording_step)
        assert seen and all(phases == expected for phases in seen)
    with pytest.raises(ValueError, match="temperature 0"):  # argmax tokens are not samples from p
        minibass.speculative_generate(target, draft, PROMPTS, 6, sampling=SamplingParams(temperature=0.8), seed=0,
                                      phases=speculative.GREEDY_PHASES)


def test_greedy_accept_phase_matches_accept_phase_on_random_one_hot_steps():
    """The two accept phases on the same step: random drafts and target tokens (agreeing often), ragged
    draft lengths, idle rows; one-hot q and p for the general phase."""
    gen = torch.Generator().manual_seed(0)
    vocab, streams = 5, minibass.sampling.SeedStreams(0, 6)
    for _ in range(200):
        batch, kmax = 6, int(torch.randint(0, 5, (), generator=gen))
        active = torch.rand(batch, generator=gen) < 0.8
        draft_lens = torch.where(active, torch.randint(0, kmax + 1, (batch,), generator=gen), 0)
        target_tokens = torch.randint(0, 2, (batch, kmax + 1), generator=gen)  # two tokens: frequent agreement
        drafted = torch.arange(kmax) < draft_lens[:, None]  # (B, kmax)
        drafts = torch.where(drafted, torch.randint(0, 2, (batch, kmax), generator=gen), 0)
        q = torch.nn.functional.one_hot(drafts, vocab).double() * drafted[..., None]
        p = torch.nn.functional.one_hot(target_tokens, vocab).double()
        n, y = speculative.accept_phase(drafts, q if kmax else None, p, draft_lens, active, streams)
        n_fast, y_fast = speculative.greedy_accept_phase(drafts, None, target_tokens, draft_lens, active, streams)
        assert torch.equal(n[active], n_fast[active]) and torch.equal(y[active], y_fast[active])


def test_greedy_with_eos_hit_mid_draft(models):
    target = models["target"]
    ref = minibass.generate(target, PROMPTS, 12, sampling=GREEDY, attention="naive").tokens
    eos = ref[0][3]  # emitted by sequence 0 at step 4: inside its first 7-token draft
    expected = [r[:r.index(eos) + 1] if eos in r else r for r in ref]
    for draft in (target, models["other"]):
        result = minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY, draft_length="dynamic",
                                               attention="padded", eos_token_id=eos)
        assert result.tokens == expected
    assert minibass.generate(target, PROMPTS, 12, sampling=GREEDY, attention="naive", eos_token_id=eos).tokens == expected


def test_greedy_batch_invariance_across_backends(models):
    target, draft = models["target"], models["other"]
    batch = minibass.speculative_generate(target, draft, PROMPTS, 8, sampling=GREEDY, attention="padded").tokens
    for prompt, tokens in zip(PROMPTS, batch):
        for attention in ("naive", "split") + ("ragged",) * triton_available():  # alone, with each other backend
            alone = minibass.speculative_generate(target, draft, [prompt], 8, sampling=GREEDY, attention=attention)
            assert alone.tokens[0] == tokens


# --- exact distributions, end to end ------------------------------------------------------------------

MAIN_PROMPT, OTHER_PROMPTS = [1, 2], [[3], [0, 1, 2, 3, 0], [2, 2, 2]]
N_TABLE = 20_000  # rows carrying the main prompt


def table_pair():
    target = TableLM.random(4, order=2, period=3, seed=10, zero_fraction=0.15)
    draft = TableLM.random(4, order=1, period=2, seed=11)
    return target, draft


def g_test_pvalue(samples, exact_dist):
    """G-test of tuples of tokens against an exact [V] * n distribution (the oracle's, small cells pooled)."""
    return stats.g_test(Counter(samples), stats.table_events(exact_dist)).pvalue


def sample_main_prompt(target, draft, params, draft_length, n_rows, n_tokens, seed, attention="padded",
                       phases=speculative.Phases()):
    """A ragged batch: n_rows copies of MAIN_PROMPT interleaved with other prompts."""
    prompts = [MAIN_PROMPT] * n_rows + OTHER_PROMPTS * 50
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    shuffled = [prompts[i] for i in order]
    result = minibass.speculative_generate(target, draft, shuffled, n_tokens, sampling=params,
                                           draft_length=draft_length, seed=seed, attention=attention,
                                           phases=phases)
    return [tuple(result.tokens[j]) for j, i in enumerate(order) if i < n_rows], result


TABLE_CASES = [
    (SamplingParams(), 1),
    (SamplingParams(temperature=0.7, top_k=3), "dynamic"),
    (SamplingParams(temperature=1.3, top_p=0.8), 4),
    (SamplingParams(), "per-sequence"),
    (SamplingParams(temperature=0.9), "auto"),
]


@pytest.mark.parametrize("params,draft_length", TABLE_CASES, ids=lambda x: str(x))
def test_table_models_emit_the_exact_target_distribution(params, draft_length):
    target, draft = table_pair()
    samples, result = sample_main_prompt(target, draft, params, draft_length, N_TABLE, 3, seed=1)
    pvalue = g_test_pvalue(samples, exact.autoregressive_distribution(target, MAIN_PROMPT, 3, params))
    print(f"{params} k={draft_length}: p = {pvalue:.3g}, acceptance {result.stats.acceptance_rate:.2f}")
    assert pvalue > ALPHA


@pytest.fixture(scope="module")
def transformer_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    small = dict(vocab_size=5, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    hf_tiny("llama", seed=5, **small).save_pretrained(folder / "target")
    hf_tiny("qwen2", seed=6, **small).save_pretrained(folder / "draft")
    return minibass.load_model(folder / "target"), minibass.load_model(folder / "draft")


@pytest.mark.parametrize("params,draft_length", [(SamplingParams(), 3),
                                                 (SamplingParams(temperature=0.8, top_k=4, top_p=0.9), "dynamic")],
                         ids=str)
def test_transformers_loaded_from_disk_emit_the_exact_target_distribution(transformer_pair, params, draft_length):
    target, draft = transformer_pair
    samples, result = sample_main_prompt(target, draft, params, draft_length, 4000, 3, seed=2)
    pvalue = g_test_pvalue(samples, exact.autoregressive_distribution(target, MAIN_PROMPT, 3, params))
    print(f"transformers {params} k={draft_length}: p = {pvalue:.3g}, acceptance {result.stats.acceptance_rate:.2f}")
    assert pvalue > ALPHA


# The tests above decode 3 tokens, so a step drafts at most 2 (the budget caps every draft): there
# every policy drafts 2, then 1, then 0, and none of them chooses anything. These decode 8 tokens with
# the oracle's generator check (each token's law given the one before, position by position), long
# enough for each policy to grow and shrink its drafts, and check that it did: the lengths a policy
# asks for are recorded before the budget caps them. BASS's dynamic length follows the batch's best
# sequence, which in a batch of thousands always accepts everything, so it runs in batches of 8.
ADAPTIVE = [  # (policy, sampling, batch size or None for all samples in one batch)
    (4, SamplingParams(), None),
    ("dynamic", SamplingParams(temperature=0.8, top_k=4), 8),  # warped on both sides, with lengths that move
    ("per-sequence", SamplingParams(), None),
    ("auto, fixed costs", SamplingParams(temperature=1.2, top_p=0.9), None),
]


class Recording:
    """A draft-length policy that records the lengths it asks for (the longest of each step)."""

    def __init__(self, name, asked):
        self.policy = make_policy(CostAwareDraftLength(costs=DraftCosts(draft_call=0.05, verify_base=1.0,
                                                                           verify_per_token=0.05))
                                  if name == "auto, fixed costs" else name)  # timings would make runs differ
        self.asked = asked

    def lengths(self, active):
        ks = self.policy.lengths(active)
        self.asked.append(max(ks))
        return ks

    def __getattr__(self, name):  # update, start, observe_costs: the policy's own
        return getattr(self.policy, name)


def adaptive_engine(name, asked, batch=None, phases=Phases(), drafted=None):
    """A ``check_generator`` engine: minibass over the oracle's pair, in batches of ``batch`` prompts, each
    sample seeded as it would be in one batch of all. ``asked``: the lengths the policy asks for, before the
    budget caps them; ``drafted``: those drafted (each step's longest)."""
    drafted = [] if drafted is None else drafted

    def generate(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
        target, draft = minibass.load_model(target_dir), minibass.load_model(draft_dir)
        tokens = []
        for first in range(0, n_samples, batch or n_samples):
            seeds = [stream_seed(seed, i) for i in range(first, min(first + (batch or n_samples), n_samples))]
            result = minibass.speculative_generate(target, draft, [list(prompt)] * len(seeds), n_tokens,
                                                   sampling=sampling, draft_length=Recording(name, asked), seed=seeds,
                                                   attention="padded", phases=phases)
            tokens += result.tokens
            drafted.extend(result.stats.draft_lengths)
        return tokens
    return generate


@pytest.mark.parametrize("name,params,batch", ADAPTIVE, ids=[str(a[0]) for a in ADAPTIVE])
def test_every_draft_length_policy_emits_the_exact_target_distribution(name, params, batch):
    asked, drafted = [], []
    verdict = oracle.check_generator(adaptive_engine(name, asked, batch, drafted=drafted), n_tokens=8, samples=4000,
                                     sampling=params)
    print(verdict, Counter(asked), Counter(drafted))
    assert verdict.ok, str(verdict)
    assert max(drafted) >= 4, Counter(drafted)  # drafts the 3-token tests cannot reach
    assert name == 4 or len(set(asked)) >= 3, Counter(asked)  # and a policy that adapts, adapted


def late_rows_shifted(drafts, q, p, draft_lens, active, streams):
    """The rows of p from the fifth on (draft 5 and later, and the bonus token after 4 drafts) are replaced by the
    row before: a bug only a step that drafts 4 or more tokens can show."""
    p = p.clone()
    if p.shape[1] > 4:
        p[:, 4:] = p[:, 3:-1].clone()
    return speculative.accept_phase(drafts, q, p, draft_lens, active, streams)


@pytest.mark.parametrize("name,batch", [(4, None), ("dynamic", 8)])
def test_a_bug_that_needs_four_drafts_fails_the_adaptive_test(name, batch):
    """The power of the test above where the 3-token tests have none: there no step drafts more than 2, so the
    bug never runs. Here the fifth token, the first that can come from the broken row, fails its test."""
    verdict = oracle.check_generator(adaptive_engine(name, [], batch, Phases(accept=late_rows_shifted)),
                                     n_tokens=8, samples=4000)
    print(verdict)
    failed = {c.name for c in verdict.failures()}
    assert "token 5 | token 4" in failed and not {"runs", "output", "continuations returned"} & failed
    target, draft = table_pair()
    three = minibass.speculative_generate(target, draft, [MAIN_PROMPT] * 8, 3, draft_length=name, seed=1)
    assert max(three.stats.draft_lengths) == 2


# --- planted bugs -----------------------------------------------------------------------------------------
# Each bug is a broken twin of one phase, handed to the loop through its documented seam
# (``speculative_generate(..., phases=...)``), so a refactor of the loop cannot silently disarm these tests.

def rollback_one_short(target_cache, draft_cache, seq_lens):
    """The target cache keeps one token fewer than the history confirms."""
    speculative.rollback_phase(target_cache, draft_cache, seq_lens)
    target_cache.truncate((target_cache.lengths - 1).clamp(min=0))


def bonus_from_wrong_position(drafts, q, p, draft_lens, active, streams):
    """The bonus token is drawn from p_k instead of p_{k+1}."""
    p = p.clone()
    rows = torch.arange(len(draft_lens))
    p[rows, draft_lens] = p[rows, (draft_lens - 1).clamp(min=0)]
    return speculative.accept_phase(drafts, q, p, draft_lens, active, streams)


def stale_draft_probs():
    """q at the first position is the one of the previous step: not what x_1 was sampled from."""
    previous = {}

    def draft(*args):
        drafts, q = speculative.draft_phase(*args)
        if q is not None:
            fresh = q[:, 0].clone()
            if "q" in previous:
                q[:, 0] = previous["q"]
            previous["q"] = fresh
        return drafts, q

    return draft


def target_unwarped(target, cache, history, seq_lens, drafts, draft_lens, active, sampling, attention):
    """The target's p without the temperature, top-k and top-p the draft's q was warped with."""
    return speculative.verify_phase(target, cache, history, seq_lens, drafts, draft_lens, active, SamplingParams(),
                                    attention)


WARPED = SamplingParams(temperature=0.7, top_k=3)
PLANTED = {  # name: (the broken phases, the sampling they run with)
    "rollback_one_short": (lambda: Phases(rollback=rollback_one_short), SamplingParams()),
    "bonus_from_wrong_position": (lambda: Phases(accept=bonus_from_wrong_position), SamplingParams()),
    "stale_draft_probs_after_rollback": (lambda: Phases(draft=stale_draft_probs()), SamplingParams()),
    "warping_on_the_draft_only": (lambda: Phases(verify=target_unwarped), WARPED),
}


@pytest.mark.parametrize("bug", sorted(PLANTED) + ["none, temperature 1", "none, warped"])
def test_each_planted_bug_breaks_the_distribution_test(bug):
    """Draft length 2, 4 tokens. Each planted bug fails, also by the G-test over the events the target
    allows (not only by emitting an impossible one); the loop without a bug, in the same setting, passes."""
    target, draft = table_pair()
    phases, params = PLANTED.get(bug, (Phases, WARPED if bug.endswith("warped") else SamplingParams()))
    samples, _ = sample_main_prompt(target, draft, params, 2, N_TABLE, 4, seed=1, phases=phases())
    exact_dist = exact.autoregressive_distribution(target, MAIN_PROMPT, 4, params)
    possible, impossible = stats.split_impossible(Counter(samples), stats.table_events(exact_dist))
    pvalue, possible_pvalue = g_test_pvalue(samples, exact_dist), g_test_pvalue(possible.elements(), exact_dist)
    print(f"planted {bug}: p = {pvalue:.3g}, {sum(impossible.values())} impossible rows, "
          f"p over the possible ones = {possible_pvalue:.3g}")
    if bug.startswith("none"):
        assert pvalue > ALPHA
    else:
        assert pvalue < ALPHA and possible_pvalue < ALPHA


def forget_x_k_after_full_acceptance(draft, cache, history, seq_lens, draft_lens, *rest):
    """The draft catches up on y alone after a full acceptance, skipping x_k: its context shifts by one."""
    unseen = seq_lens - cache.lengths  # 2 after a full acceptance (x_k and y), else 1
    shifted = history.clone()
    for b in (unseen == 2).nonzero().flatten().tolist():
        shifted[b, cache.lengths[b]] = history[b, seq_lens[b] - 1]
    return speculative.draft_phase(draft, cache, shifted, seq_lens - (unseen == 2).long(), draft_lens, *rest)


def test_draft_catch_up_off_by_one_is_caught_by_the_acceptance_rate():
    """Forgetting x_k after full acceptance only corrupts the draft's context. The output stays
    exact (q is still the distribution each draft was sampled from: the theorem holds for any
    draft), so the distribution test cannot see it; but a draft equal to the target must accept
    everything, and this bug makes it reject."""
    target, _ = table_pair()
    prompts = [MAIN_PROMPT] * 200 + OTHER_PROMPTS
    healthy = minibass.speculative_generate(target, target, prompts, 12, draft_length=3, seed=0, attention="padded")
    assert healthy.stats.acceptance_rate == 1.0
    buggy_phases = Phases(draft=forget_x_k_after_full_acceptance)
    buggy = minibass.speculative_generate(target, target, prompts, 12, draft_length=3, seed=0, attention="padded",
                                          phases=buggy_phases)
    print(f"catch-up off by one: acceptance with draft == target {buggy.stats.acceptance_rate:.3f}")
    assert buggy.stats.acceptance_rate < 0.9
    samples, _ = sample_main_prompt(target, target, SamplingParams(), 3, N_TABLE, 3, seed=4, phases=buggy_phases)
    assert g_test_pvalue(samples, exact.autoregressive_distribution(target, MAIN_PROMPT, 3)) > ALPHA


# --- stats, policies, seeds, bad input ---------------------------------------------------------------------

def test_stats(models):
    target = models["target"]
    ref = minibass.generate(target, PROMPTS, 12, sampling=GREEDY, attention="naive").tokens
    eos = ref[1][1]
    result = minibass.speculative_generate(target, models["other"], PROMPTS, 12, sampling=GREEDY, draft_length=4,
                                           attention="padded", eos_token_id=eos)
    s = result.stats
    assert s.steps == len(s.accepted) == len(s.draft_lengths)
    assert s.target_calls == s.steps + 1  # prefill + one verify per step
    assert all(0 <= n <= 4 or n == IDLE for row in s.accepted for n in row)
    finished_early = [b for b, t in enumerate(result.tokens) if len(t) < 12]
    assert finished_early and s.accepted[-1][finished_early[0]] == IDLE
    assert s.new_tokens == sum(map(len, result.tokens))
    assert s.tokens_per_target_call == s.new_tokens / (s.steps + 1)
    assert set(s.time_split) == {"draft", "verify", "accept", "rollback"}
    assert 0 <= s.acceptance_rate <= 1
    one = minibass.speculative_generate(target, models["other"], PROMPTS, 1, sampling=GREEDY, attention="padded")
    assert one.stats.proposed_tokens == 0 and one.stats.acceptance_rate is None  # a budget of 1: nothing drafted


def test_bass_dynamic_policy_follows_algorithm_1():
    policy = BassDynamicDraftLength()
    seen = []
    for accepted_all in [True, True, False, False, False, True]:
        (k,) = policy.lengths([0])
        seen.append(k)
        policy.update([0], [k], [k if accepted_all else 0])
    # 7 -> 9 -> 11 -> 11 - ceil(1.1) - 0 = 9 -> 9 - 1 - 1 = 7 -> 7 - 1 - 1 = 5 -> 7
    assert seen == [7, 9, 11, 9, 7, 5]
    (k,) = policy.lengths([0])
    assert k == 7
    policy = BassDynamicDraftLength(l_draft=30)
    policy.update([0, 1], [30, 30], [30, 2])
    assert policy.l_draft == 32  # capped at l_limit
    policy.update([0, 1], [32, 32], [20, 3])
    assert policy.l_draft == 28  # max(1, 20, 32 - ceil(3.2) - 0)
    policy.update([0], [28], [27])
    assert policy.l_draft == 27  # never below the best accepted count


def test_a_full_acceptance_resets_s_and_a_tie_goes_to_the_sequence_that_accepted_everything():
    policy = BassDynamicDraftLength()
    policy.update([0], [7], [0])  # a miss: 7 - ceil(0.7) - 0 = 6, s = 1
    policy.update([0], [6], [6])  # all accepted: 8, s = 0
    policy.update([0], [8], [0])  # a miss: 8 - 1 - 0 = 7 (not 6: s was reset)
    assert (policy.l_draft, policy.s) == (7, 1)
    policy = BassDynamicDraftLength(l_draft=5)
    policy.update([0, 1], [5, 3], [3, 3])  # both accepted 3; sequence 1, capped at 3 by its budget, all of it
    assert (policy.l_draft, policy.s) == (7, 0)


def test_a_sequence_that_proposed_nothing_does_not_decide_the_step():
    """Sequence 0 reached its token budget and drafted 0 tokens: it did not 'accept its whole draft'."""
    policy = BassDynamicDraftLength()
    policy.update(active=[0, 1], proposed=[0, 7], accepted=[0, 0])
    assert (policy.l_draft, policy.s) == (6, 1)  # Algorithm 1 on sequence 1 alone: max(1, 0, 7 - ceil(0.7) - 0)
    policy.update(active=[0], proposed=[0], accepted=[0])
    assert (policy.l_draft, policy.s) == (6, 1)  # nobody drafted: no update


# alpha (every sequence), costs (draft call, verify base, verify per token) -> the k "auto" picks
COST_AWARE_CHOICES = [
    (0.3, DraftCosts(0.1, 1.0, 0.05), 1),  # drafts mostly rejected: the shortest draft
    (0.6, DraftCosts(0.1, 1.0, 0.05), 2),
    (0.9, DraftCosts(0.1, 1.0, 0.05), 8),  # cheap drafts, high acceptance: as long as allowed
    (0.9, DraftCosts(0.5, 1.0, 0.05), 3),  # the same acceptance with drafts 5x dearer
    (0.9, DraftCosts(0.05, 1.0, 0.5), 4),  # a verify that grows fast with its length
]


@pytest.mark.parametrize("alpha,costs,expected", COST_AWARE_CHOICES)
def test_cost_aware_policy_maximises_expected_tokens_per_second(alpha, costs, expected):
    s, f = alpha * 1000, (1 - alpha) * 1000  # 1000 trials each: the posterior mean is alpha to 1e-3
    policy = CostAwareDraftLength(k_max=8, costs=costs, successes={0: s, 1: s}, failures={0: f, 1: f})
    assert policy.alphas([0, 1]) == pytest.approx([alpha, alpha], abs=1e-3)
    assert policy.lengths([0, 1]) == [expected, expected]


def test_cost_aware_policy_measures_costs_and_acceptance():
    policy = CostAwareDraftLength()
    for k, rest in [(1, 1.05), (3, 1.15), (1, 1.05), (3, 9.99)]:  # nothing timed twice yet: 1, 3, 1, 3
        assert policy.lengths([0]) == [k] and policy.measured_costs() is None
        policy.observe_costs(k, 0.1 * k, rest)
    costs = policy.measured_costs()  # 0.1 s per draft call; rest of the step = 0.95 + 0.05 * (k + 1)
    assert costs.draft_call == pytest.approx(0.1) and costs.verify_per_token == pytest.approx(0.05)
    assert costs.verify_base == pytest.approx(0.95)  # the fastest k = 3 time: the slow spell (9.99) is dropped
    policy.observe_costs(1, 0.1, 1.50)  # slower again at k = 1: the fastest is kept
    assert policy.measured_costs() == costs
    policy.observe_costs(3, 0.3, 0.5)  # a verify of 4 tokens cheaper than one of 2: the line is flat, not falling
    assert policy.measured_costs().verify_per_token == 0.0
    policy = CostAwareDraftLength(recent=2)  # each k priced by the fastest of its 2 latest steps
    for k, rest in [(1, 1.0), (3, 1.2), (1, 1.1), (3, 1.2), (1, 1.1)]:
        policy.observe_costs(k, 0.1 * k, rest)
    assert policy.measured_costs().verify_base + 2 * policy.measured_costs().verify_per_token == pytest.approx(1.1)
    policy = CostAwareDraftLength(pull=0)  # no pull towards the batch: the plain Beta(1/2, 1/2) posterior
    policy.update([0], [4], [4])  # 4 accepted, no rejection
    assert policy.alphas([0]) == pytest.approx([4 / 4])  # with pull 0 and one sequence: s / (s + f)
    policy.update([0], [4], [1])  # 1 accepted, then a rejection; the older step now weighs 0.9
    assert policy.alphas([0]) == pytest.approx([(0.9 * 4 + 1) / (0.9 * 4 + 1 + 1)])
    for bad, match in [(dict(k_max=0), "k_max"), (dict(memory=1.5), "memory"), (dict(pull=-1), "pull"),
                       (dict(recent=0), "recent")]:
        with pytest.raises(ValueError, match=match):
            CostAwareDraftLength(**bad)


def test_cost_aware_policy_prices_each_batch_size_apart():
    """The batch shrinks as sequences finish, and a smaller batch steps faster: costs are fitted per
    batch size, from the nearest larger batch timed at two lengths when the current one is not."""
    policy = CostAwareDraftLength()
    for batch, scale in ((8, 2.0), (2, 1.0)):
        for k in (1, 3, 1, 3):
            policy.lengths(list(range(batch)))  # a step of this batch size
            policy.observe_costs(k, 0.1 * k * scale, scale * (0.95 + 0.05 * (k + 1)))
    assert policy.measured_costs(8).verify_base == pytest.approx(1.9)
    assert policy.measured_costs(2).verify_base == pytest.approx(1.9)  # timed twice per length: still batch 8's
    for k in (1, 3):  # a third time each (``recent``): now batch 2 is priced from its own timings
        policy.observe_costs(k, 0.1 * k, 0.95 + 0.05 * (k + 1))
    assert policy.measured_costs(2).verify_base == pytest.approx(0.95)
    assert policy.measured_costs(2).draft_call == pytest.approx(0.1)  # draft calls priced per batch size too
    assert policy.measured_costs(8).draft_call == pytest.approx(0.2)
    assert policy.measured_costs(4).verify_base == pytest.approx(1.9)  # not timed at 4: batch 8's, the dearer
    assert policy.measured_costs(16) is None  # larger than any batch timed: unknown, to be timed
    assert [policy.lengths(list(range(16)))[0] for _ in range(2)] == [1, 1]  # its trials, counted at batch 16
    policy.observe_costs(1, 0.4, 4.0)
    assert policy.lengths(list(range(16)))[0] == 3
    policy.lengths(list(range(8)))
    policy.observe_costs(2, 0.2, 99.0)  # k = 2 timed once, in a slow spell: left out of the line
    assert policy.measured_costs(8).verify_base == pytest.approx(1.9)
    policy.observe_costs(0, 0.0, 0.01)  # nobody drafted (the budget's end): a plain target step, not timed
    assert all(k > 0 for _, k in policy.verify_times)
    shrinking = CostAwareDraftLength()  # a batch that loses a sequence during its trials: they go on in turn
    ks = []
    for batch in (8, 7, 7, 6):
        ks.append(shrinking.lengths(list(range(batch)))[0])
        shrinking.observe_costs(ks[-1], 0.1 * ks[-1], 1.0 + 0.05 * ks[-1])
    assert ks == [1, 3, 1, 3]


def test_a_policy_object_serves_several_calls(models):
    """``start`` at each call: the cost-aware policy forgets the previous call's sequences and keeps
    its timings, so a second call starts from measured costs instead of trying k = 1, 3, 1, 3."""
    target, draft = models["target"], models["other"]
    seen = []  # before each step: the acceptance counts the policy holds, and whether it knows the costs

    class Watching(CostAwareDraftLength):
        def lengths(self, active):
            seen.append((dict(self.successes), self.measured_costs(len(active)) is not None))
            return super().lengths(active)

    policy = Watching()
    first = minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY, draft_length=policy)
    assert first.stats.draft_lengths[:4] == [1, 3, 1, 3] and not seen[0][1]
    assert policy.successes  # what the first call's sequences accepted
    steps = len(seen)
    second = minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY, draft_length=policy)
    assert seen[steps] == ({}, True)  # sequences forgotten at the start, costs known from the first call
    assert second.tokens == first.tokens  # greedy: the same tokens whatever the lengths
    per_sequence = PerSequenceDynamicDraftLength()
    minibass.speculative_generate(target, draft, PROMPTS, 12, sampling=GREEDY, draft_length=per_sequence)
    per_sequence.states[0].l_draft = 30
    again = minibass.speculative_generate(target, draft, PROMPTS, 1, sampling=GREEDY, draft_length=per_sequence)
    assert again.stats.draft_lengths == [0]  # a one-token budget drafts nothing, so no update
    assert per_sequence.states[0].l_draft == 7  # and sequence 0 starts again from Algorithm 1's 7


def test_cost_aware_policy_follows_the_slowest_sequence():
    """A batch steps until its slowest sequence is done: the choice is the one for the lowest alpha."""
    costs = DraftCosts(0.1, 1.0, 0.05)
    high, low = dict(successes=950.0, failures=50.0), dict(successes=300.0, failures=700.0)  # alpha 0.95, 0.3
    policy = CostAwareDraftLength(costs=costs, successes={0: high["successes"], 1: low["successes"]},
                                  failures={0: high["failures"], 1: low["failures"]})
    assert policy.lengths([0])[0] >= 12  # alpha 0.95 and cheap drafts: long drafts
    assert policy.lengths([1]) == [1]
    assert policy.lengths([0, 1]) == [1, 1]  # together: what the slow one needs


def test_cost_aware_policy_pulls_a_short_history_towards_the_batch():
    """One rejection in a sequence's only step does not make it the batch's slowest when the batch
    as a whole accepts nearly everything."""
    policy = CostAwareDraftLength(costs=DraftCosts(0.1, 1.0, 0.05))
    policy.successes, policy.failures = {0: 200.0, 1: 0.0}, {0: 2.0, 1: 1.0}  # 1: a single step, 0 of 4 accepted
    unpulled = CostAwareDraftLength(costs=policy.costs, pull=0, successes=dict(policy.successes),
                                    failures=dict(policy.failures))
    assert unpulled.alphas([0, 1])[1] < 0.01 and unpulled.lengths([0, 1]) == [1, 1]
    assert policy.alphas([0, 1])[1] > 0.6 and policy.lengths([0, 1])[0] > 1


def test_the_pooled_prior_is_beta_one_half_and_certain_acceptance_gives_k_plus_one():
    policy = CostAwareDraftLength(successes={0: 1.0}, failures={0: 0.0})
    pooled = (0.5 + 1) / (1 + 1)
    assert policy.alphas([0]) == pytest.approx([(1 + 10 * pooled) / (1 + 10)])
    assert expected_tokens(1.0, 3) == 4.0 == pytest.approx(expected_tokens(1 - 1e-9, 3))
    # alpha = 1 and drafts dearer than the verify: one draft per step, not k_max
    policy = CostAwareDraftLength(k_max=8, pull=0, costs=DraftCosts(draft_call=2.0, verify_base=0.1,
                                                                    verify_per_token=0.0),
                                  successes={0: 5.0}, failures={0: 0.0})
    assert policy.lengths([0]) == [1]


def test_draft_calls_are_priced_per_call_by_the_fastest():
    policy = CostAwareDraftLength()
    for k, per_call in [(2, 0.1), (3, 0.2), (2, 0.3), (3, 0.1)]:
        policy.lengths([0])
        policy.observe_costs(k, per_call * k, 1.0 + 0.05 * (k + 1))
    assert policy.measured_costs(1).draft_call == pytest.approx(0.1)


def test_cost_aware_policy_forgets_old_steps():
    """After a run of rejections, fully accepted drafts lift alpha (memory 0.9); with memory 1
    (every step counts forever) the same history keeps it low."""
    history = [(4, 0)] * 20 + [(4, 4)] * 10
    alphas = {}
    for memory in (0.9, 1.0):
        policy = CostAwareDraftLength(memory=memory)
        for k, n in history:
            policy.update([0], [k], [n])
        alphas[memory] = policy.alphas([0])[0]
    assert alphas[0.9] > 0.85
    assert alphas[1.0] < 0.7


def test_the_loop_tells_a_cost_aware_policy_the_draft_time_and_the_rest_of_each_step(models):
    """``observe_costs`` hears the draft phase and the rest of the step: verify, accept, roll-back and
    the loop's bookkeeping, so each step's two parts add up to no more than the whole run."""
    heard = []

    class Listening(FixedDraftLength):
        def observe_costs(self, k, draft_seconds, verify_seconds):
            heard.append((k, draft_seconds, verify_seconds))

    result = minibass.speculative_generate(models["target"], models["other"], PROMPTS, 6, draft_length=Listening(2),
                                           seed=0)
    split = result.stats.time_split
    assert len(heard) == result.stats.steps and [k for k, _, _ in heard] == result.stats.draft_lengths
    assert sum(d for _, d, _ in heard) == pytest.approx(split["draft"])
    rest = sum(r for _, _, r in heard)
    assert rest >= split["verify"] + split["accept"] + split["rollback"]
    assert split["draft"] + rest <= result.stats.wall_time


def test_same_seed_same_tokens(models):
    run = lambda seed: minibass.speculative_generate(models["target"], models["other"], PROMPTS, 6,  # noqa: E731
                                                     seed=seed, attention="padded").tokens
    assert run(3) == run(3)
    assert run(3) != run(4)


class BadPolicy:
    def lengths(self, active):
        return [0] * len(active)

    def update(self, active, proposed, accepted):
        pass


@pytest.mark.parametrize("kwargs,message", [
    (dict(draft_length=0), "draft_length must be an int >= 1"),
    (dict(draft_length="sometimes"), "draft_length must be"),
    (dict(draft_length=BadPolicy()), "one int >= 1 per active sequence"),
    (dict(prompts=[]), "non-empty list"),
    (dict(prompts=[[1], []]), "prompts\\[1\\]"),
    (dict(max_new_tokens=-2), "max_new_tokens"),
    (dict(max_new_tokens=60), "max_seq_len"),
    (dict(sampling="greedy"), "SamplingParams"),
])
def test_bad_input(models, kwargs, message):
    args = dict(target=models["target"], draft=models["other"], prompts=PROMPTS, max_new_tokens=4,
                attention="padded")
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        minibass.speculative_generate(**args)


def test_a_bad_policy_answer_is_shown_briefly(models):
    brief = r"per active sequence \(12\), got 12 values: \[0, 0, 0, 0, 0, 0, 0, 0, \.\.\.\]$"
    with pytest.raises(ValueError, match=brief):
        minibass.speculative_generate(models["target"], models["other"], [[1]] * 12, 4, draft_length=BadPolicy())


def test_vocabulary_mismatch(models):
    with pytest.raises(ValueError, match="share a vocabulary"):
        minibass.speculative_generate(models["target"], TableLM.random(5), [[1]], 3)
    # Checked before the prompts: token 7 is valid for the target (V = 11), not for a draft of V = 5.
    with pytest.raises(ValueError, match="share a vocabulary"):
        minibass.speculative_generate(models["target"], TableLM.random(5), [[1, 7]], 3)


def test_a_folder_path_is_not_taken_for_a_model(models):
    with pytest.raises(ValueError, match="expected a model with vocab_size, init_cache and forward"):
        minibass.speculative_generate("path/to/target", models["other"], [[1]], 3)
    with pytest.raises(ValueError, match="expected a model"):
        minibass.speculative_generate(models["target"], "path/to/draft", [[1]], 3)


def test_numpy_integers_are_draft_lengths_and_budgets(models):
    greedy = SamplingParams(temperature=0)
    expected = minibass.speculative_generate(models["target"], models["other"], PROMPTS, 5, sampling=greedy,
                                             draft_length=3, attention="padded")
    got = minibass.speculative_generate(models["target"], models["other"], PROMPTS, np.int64(5), sampling=greedy,
                                        draft_length=np.int64(3), attention="padded")
    assert got.tokens == expected.tokens and got.stats.draft_lengths == expected.stats.draft_lengths

    class NumpyPolicy(FixedDraftLength):  # answers as NumPy code would: NumPy integers, unsigned ones too
        def lengths(self, active):
            return [np.uint64(self.k) if b % 2 else np.int64(self.k) for b in active]

    got = minibass.speculative_generate(models["target"], models["other"], PROMPTS, 5, sampling=greedy,
                                        draft_length=NumpyPolicy(3), attention="padded")
    assert got.tokens == expected.tokens and got.stats.draft_lengths == expected.stats.draft_lengths
    assert {type(k) for k in got.stats.draft_lengths} == {int}  # made plain ints, as the stats promise
    policy = CostAwareDraftLength(k_max=np.int64(4), recent=np.int64(2))
    assert type(policy.k_max) is int and type(policy.recent) is int


def test_a_policy_class_is_refused_with_the_instance_it_needs(models):
    with pytest.raises(ValueError, match=r"not its class: pass BassDynamicDraftLength\(\)"):
        minibass.speculative_generate(models["target"], models["other"], PROMPTS, 5,
                                      draft_length=BassDynamicDraftLength)


def test_fixed_policy_validates():
    with pytest.raises(ValueError):
        FixedDraftLength(True)
