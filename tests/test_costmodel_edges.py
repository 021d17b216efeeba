"""Edges of the cost model (minibass/costmodel.py) and of the scripts built on it: scripts/auto_constants.py,
scripts/pair_acceptance.py and scripts/auto_vs_best.py. Nothing here times anything: clocks, timed calls and
models are stand-ins where the code would measure."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from minibass import costmodel as cm
from minibass.draft_length import expected_tokens
from conftest import script

SHAPE = cm.ModelShape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100, tied=True)


# --- the cost model ------------------------------------------------------------------------------------------

def test_a_negative_overhead_of_either_kind_is_refused():
    for overheads in (dict(call_overhead=-1e-6), dict(layer_overhead=-1e-6)):
        with pytest.raises(ValueError, match="overheads >= 0"):
            cm.Hardware("x", 1e12, 1e9, **overheads)
    assert cm.Hardware("x", 1e12, 1e9, call_overhead=0.0, layer_overhead=0.0).layer_overhead == 0


def test_from_config_fills_in_what_a_config_leaves_out_and_keeps_the_element_size():
    """No kv heads given: one per head (no grouped-query attention); no tie flag: an untied head; no head dim:
    hidden // heads. The element size asked for is the one the shape gets."""
    bare = SimpleNamespace(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                           vocab_size=100)
    shape = cm.ModelShape.from_config(bare)
    assert (shape.kv_heads, shape.tied, shape.head_dim, shape.bytes_per_element) == (4, False, 16, 2)
    assert cm.ModelShape.from_config(SimpleNamespace(**vars(bare), num_key_value_heads=None)).kv_heads == 4
    fp32 = cm.ModelShape.from_config(SimpleNamespace(**vars(bare), num_key_value_heads=2), bytes_per_element=4)
    assert fp32.bytes_per_element == 4 and fp32.kv_heads == 2
    assert fp32.bytes(1, 1, 0) == 2 * cm.ModelShape(2, 64, 4, 2, 128, 100, tied=False).bytes(1, 1, 0)


def test_an_untied_model_reads_its_head_but_not_its_embedding_table():
    """Untied, the parameters count the vocab x hidden matrix twice; a call reads only the head's copy (the
    embedding rows it gathers are negligible), so its bytes are those of the tied model of that shape."""
    d, D, L = 64, 16, 2
    untied = cm.ModelShape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100, tied=False)
    per_layer = d * 4 * D * 2 + d * 2 * D * 2 + 3 * d * 128
    assert untied.params == L * per_layer + 2 * 100 * d
    assert untied.bytes(3, 2, 5) == SHAPE.bytes(3, 2, 5) == 2 * (L * per_layer + 100 * d + 2 * L * 2 * D * 3 * 7)
    assert untied.flops(3, 2, 5) == SHAPE.flops(3, 2, 5)


def test_intensity_is_flops_per_byte_and_grows_with_the_batch():
    assert SHAPE.intensity(3, 2, 5) == SHAPE.flops(3, 2, 5) / SHAPE.bytes(3, 2, 5)
    assert SHAPE.intensity(1, 1, 0) < SHAPE.intensity(8, 1, 0) < SHAPE.intensity(64, 1, 0)


def test_critical_batch_refuses_a_negative_context():
    with pytest.raises(ValueError, match="context >= 0"):
        cm.critical_batch(SHAPE, cm.A100, context=-1)


@pytest.mark.parametrize("shape, batch, context", [
    (SHAPE, 1, 0), (SHAPE, 3, 0), (SHAPE, 50, 0),
    # here the closed form rounds to 1.0000000000000002 and its ceiling to 2: the answer must be mended to 1
    (cm.ModelShape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=210), 1, 1),
])
def test_a_batch_whose_flops_and_bytes_take_exactly_as_long_is_compute_bound(shape, batch, context):
    """Hardware chosen so that at ``batch`` the FLOPs and the bytes take exactly one second each (both whole
    numbers, so the division is exact): that batch is the first compute-bound one, not the one after it."""
    hw = cm.Hardware("tie", shape.flops(batch, 1, context), shape.bytes(batch, 1, context))
    assert shape.flops(batch, 1, context) / hw.peak_flops == shape.bytes(batch, 1, context) / hw.bandwidth == 1.0
    assert cm.critical_batch(shape, hw, context=context) == batch


def test_the_speedup_prices_a_verify_of_k_plus_one_tokens_and_draft_calls_over_the_same_cache():
    """Compute-bound hardware (so that every token's FLOPs count) and a long cache (so that attention does):
    the prediction equals the formula written out with the step times of each call."""
    hw = cm.Hardware("slow", peak_flops=1e9, bandwidth=1e18)
    draft = cm.ModelShape(1, 32, 2, 1, 64, 100)
    k, alpha, batch, context = 3, 0.6, 2, 512
    regular = SHAPE.flops(batch, 1, context) / 1e9
    verify = SHAPE.flops(batch, k + 1, context) / 1e9
    drafting = draft.flops(batch, 1, context) / 1e9
    assert cm.step_time(SHAPE, hw, batch, k + 1, context) == pytest.approx(verify, rel=1e-12)
    want = expected_tokens(alpha, k) * regular / (verify + k * drafting)
    got = cm.speculative_speedup(SHAPE, draft, hw, batch=batch, k=k, alpha=alpha, context=context)
    assert got == pytest.approx(want, rel=1e-9)
    assert got == pytest.approx(cm.speedup_from_costs(regular, verify, drafting, k=k, alpha=alpha), rel=1e-9)


@pytest.mark.parametrize("threads, words", [(1, "1 thread"), (2, "2 threads"), (3, "3 threads")])
def test_cpu_threads_says_thread_for_one_and_threads_for_more(monkeypatch, threads, words):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    assert cm.cpu_threads() == words


class _FakeTorch:
    """Stands in for torch in measure_cpu: each matmul and each sum advances a fake clock by the next of its
    scripted durations (the first one is the warm-up's), and records that it ran."""

    def __init__(self, matmul_s, sum_s):
        self.now, self.matmul_s, self.sum_s, self.empty_numel = 0.0, list(matmul_s), list(sum_s), None
        fake = self

        class Matrix:
            def __matmul__(self, other):
                fake.now += fake.matmul_s.pop(0)

        class Big:
            def fill_(self, value):
                pass

            def numel(self):
                return fake.empty_numel

            def sum(self):
                fake.now += fake.sum_s.pop(0)

        self.Matrix, self.Big = Matrix, Big

    def randn(self, *size):
        return self.Matrix()

    def empty(self, numel):
        self.empty_numel = numel
        return self.Big()

    def get_num_threads(self):
        return 2

    def perf_counter(self):
        return self.now


def test_measure_cpu_divides_the_work_by_its_fastest_timed_call_after_a_warm_up(monkeypatch):
    """Matmuls take 0.5 s (the warm-up), then 4, 2 and 3 s: the fastest timed one is 2 s, for 2 n^3 FLOPs.
    Sums take 0.25 s (warm-up), then 8, 6, 7 s over megabytes * 2^20 bytes: the fastest is 6 s."""
    fake = _FakeTorch(matmul_s=[0.5, 4.0, 2.0, 3.0], sum_s=[0.25, 8.0, 6.0, 7.0])
    monkeypatch.setattr(cm, "torch", fake)
    monkeypatch.setattr(cm, "time", SimpleNamespace(perf_counter=fake.perf_counter))
    cpu = cm.measure_cpu(size=10, megabytes=3, reps=3)
    assert fake.matmul_s == [] and fake.sum_s == []  # one warm-up and `reps` timed calls each, no more
    assert fake.empty_numel == 3 * (1 << 20) // 4  # fp32 elements
    assert cpu.peak_flops == pytest.approx(2 * 10 ** 3 / 2.0)
    assert cpu.bandwidth == pytest.approx(3 * (1 << 20) / 6.0)
    assert cpu.name == "this CPU (2 threads, fp32)" and cpu.call_overhead == cpu.layer_overhead == 0


def test_calibrate_needs_two_measured_calls():
    hw = cm.Hardware("toy", 1e15, 1e15)
    with pytest.raises(ValueError, match="at least two"):
        cm.calibrate(hw, [(SHAPE, 8, 1, 16, 1e-3)])


def test_calibrating_hardware_that_already_has_overheads_fits_them_afresh():
    """The fit explains what the roofline leaves over: the overheads the hardware came with are no part of the
    roofline, so calibrating again from a fitted (or any) Hardware gives the same overheads."""
    true = cm.Hardware("toy", 1e15, 1e15, call_overhead=2e-4, layer_overhead=3e-5)
    calls = [(s, 8, 1, 16, cm.step_time(s, true, 8, 1, 16)) for s in (cm.ModelShape(n, 64, 4, 2, 128, 100)
                                                                      for n in (1, 4, 12))]
    for start in (true, cm.Hardware("toy", 1e15, 1e15, call_overhead=5e-3, layer_overhead=1e-3)):
        fitted = cm.calibrate(start, calls)
        assert fitted.call_overhead == pytest.approx(2e-4, rel=1e-6)
        assert fitted.layer_overhead == pytest.approx(3e-5, rel=1e-6)


def test_calibrate_puts_costs_that_fall_with_depth_on_the_call_and_never_fits_a_negative_overhead():
    hw = cm.Hardware("toy", 1e15, 1e15)
    shapes = [cm.ModelShape(n, 64, 4, 2, 128, 100) for n in (2, 12)]
    falling = cm.calibrate(hw, [(s, 8, 1, 16, cm.step_time(s, hw, 8, 1, 16) + y) for s, y in zip(shapes, (0.3, 0.1))])
    assert falling.layer_overhead == 0 and falling.call_overhead == pytest.approx(0.2)
    # Calls measured faster than the roofline (the spec sheet too pessimistic): zero overheads, not an error.
    fast = cm.calibrate(hw, [(shapes[0], 8, 1, 16, 0.5 * cm.step_time(shapes[0], hw, 8, 1, 16))] * 2)
    assert fast.call_overhead == 0 and fast.layer_overhead == 0


@pytest.mark.parametrize("mean_accepted", [-0.1, -1])
def test_alpha_from_accepted_refuses_a_negative_mean(mean_accepted):
    with pytest.raises(ValueError, match="mean_accepted"):
        cm.alpha_from_accepted(mean_accepted, 4)
    assert cm.alpha_from_accepted(0, 4) == pytest.approx(0, abs=1e-12)


# --- scripts/auto_constants.py -------------------------------------------------------------------------------

def test_auto_constants_scales_only_the_verify_slope_and_converts_every_cost_to_seconds():
    """verify5 = regular + factor (verify5 - regular): 5 + 0.6 * 1 ms and 5 + 1.4 * 1 ms; the regular step and
    the draft call as measured, in seconds."""
    models = script("auto_constants")["cost_models"]({"1": {"regular": 5.0, "draft": 0.5, "verify5": 6.0}})
    assert list(models) == ["measured", "verify slope x0.6", "verify slope x1.4"]
    for name, verify5 in [("measured", 6.0), ("verify slope x0.6", 5.6), ("verify slope x1.4", 6.4)]:
        costs = models[name]
        assert costs.regular(1) == pytest.approx(5e-3) and costs.draft(1) == pytest.approx(0.5e-3)
        assert costs.verify(1, 4) == pytest.approx(verify5 / 1e3)


def test_auto_constants_prices_whole_batches_only():
    """Ten sequences at batch 4: two batches, as ten sequences decoded in batches of 4 by a policy per batch
    would be compared on the eight that fill them; the last two are left out, not priced as a third batch."""
    from minibass.bench.policies import CallCosts, iid_runs
    from minibass.draft_length import CostAwareDraftLength

    relative_speed = script("auto_constants")["relative_speed"]
    runs = iid_runs(0.8, 10, 24, 16, seed=3)
    costs = CallCosts({1: {"regular": 5e-3, "draft": 0.5e-3, "verify5": 6e-3}})
    make = lambda: CostAwareDraftLength(pull=6, memory=0.9)  # noqa: E731
    ten, eight = (relative_speed(make, r, 24, 16, costs, 4) for r in (runs, runs[:8]))
    assert ten == eight


def test_auto_constants_main_starts_with_the_demos_prompts_and_reports_the_worst_set(tmp_path, capsys, monkeypatch):
    """With relative_speed standing in: 8 sequences a prompt set at batches 1, 4, 8, 16 at batch 16; the first
    set is the first sequences in order (the demo's); a cell is worst/mean over the sets, the last column the
    worst of all. The stand-in scores the demo's set 0.5 and every shuffle 1.0."""
    ns = script("auto_constants")
    runs = [[i] for i in range(20)]
    calls = []

    def relative_speed(make_policy, subset, new_tokens, k_max, costs, batch):
        calls.append((batch, subset))
        return 0.5 if subset == runs[:len(subset)] else 1.0

    monkeypatch.setitem(ns["main"].__globals__, "relative_speed", relative_speed)
    payload = {"provenance": {"date": "today"}, "runs": runs, "new_tokens": 24, "k_max": 16,
               "costs_ms": {"1": {"regular": 5.0, "draft": 0.5, "verify5": 6.0}}}
    (tmp_path / "p.json").write_text(json.dumps(payload))
    ns["main"](["--json", str(tmp_path / "p.json"), "--pulls", "6", "--orders", "3"])
    assert len(calls) == 3 * 4 * 3  # cost models x batch sizes x prompt sets
    assert {batch: len(subset) for batch, subset in calls} == {1: 8, 4: 8, 8: 8, 16: 16}
    assert calls[0] == (1, runs[:8])
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if "measured" in line or "verify slope" in line]
    assert len(rows) == 3 and all(row.split()[-4:] == ["0.500/0.833"] * 4 for row in rows)
    assert lines[-1].split() == ["0.500"]


def test_auto_constants_counts_steps_behind_in_the_best_fixed_lengths_steps_per_batch():
    """Every draft token accepted, 24 tokens, a step of k costs 5 + 0.75 k ms (verify 5 + 0.25 k, k draft calls of
    0.5): k = 5 takes 4 steps of 8.75 ms (35 ms; k = 6 ties, with 3 steps of 9.5 and a last one capped to 2 drafts),
    k = 3 takes 6 steps of 7.25 ms (43.5 ms), so a policy drafting 3 is 8.5 / 8.75 steps behind, for each of the two
    batches of one sequence; and a policy that drafts the best length is 0 behind."""
    from minibass.bench.policies import CallCosts

    steps_behind = script("auto_constants")["steps_behind"]
    costs = CallCosts({1: {"regular": 5e-3, "draft": 0.5e-3, "verify5": 6e-3}})
    runs = [[99] * 24, [99] * 24]
    assert steps_behind(lambda: 3, runs, 24, 16, costs, 1) == pytest.approx(8.5 / 8.75)
    assert steps_behind(lambda: 5, runs, 24, 16, costs, 1) == pytest.approx(0, abs=1e-12)


def test_auto_constants_picks_the_best_fixed_length_by_time_not_by_steps():
    """Dear draft calls (10 ms): a step of k costs 5 + 10.25 k ms, every draft token accepted, 24 tokens. k = 1
    is fastest, 12 steps of 15.25 ms (183 ms), though k = 5 takes only 4 steps (225 ms); a policy drafting 2
    takes 8 steps of 25.5 ms (204 ms): 21 ms, or 21 / 15.25 steps of k = 1, behind. Priced in k = 5's steps, as a
    best length chosen by steps would be, it would be ahead."""
    from minibass.bench.policies import CallCosts

    steps_behind = script("auto_constants")["steps_behind"]
    costs = CallCosts({1: {"regular": 5e-3, "draft": 10e-3, "verify5": 6e-3}})
    assert steps_behind(lambda: 2, [[99] * 24], 24, 16, costs, 1) == pytest.approx(21 / 15.25)


def test_auto_constants_prices_a_batch_until_its_slowest_sequence_is_done():
    """Batch 2, draft calls of 10 ms, costs doubled at batch 2 (beyond the probe at 1): one sequence accepts every
    draft token and one none, so the batch runs 24 steps whatever k. k = 1: 12 steps of both (2 x 15.25 ms), then
    11 of the slow one alone (15.25 ms) and its last step with no draft (5 ms): 538.75 ms. k = 2: 8 steps of both
    (2 x 25.5 ms), then 14 alone (25.5 ms), one capped to a draft of 1 (15.25 ms) and the last with none (5 ms):
    785.25 ms, (785.25 - 538.75) / (538.75 / 24) steps of k = 1 behind."""
    from minibass.bench.policies import CallCosts

    steps_behind = script("auto_constants")["steps_behind"]
    costs = CallCosts({1: {"regular": 5e-3, "draft": 10e-3, "verify5": 6e-3}})
    runs = [[99] * 24, [0] * 24]
    assert steps_behind(lambda: 2, runs, 24, 16, costs, 2) == pytest.approx((785.25 - 538.75) / (538.75 / 24))


def test_auto_constants_in_steps_reports_the_most_steps_behind_as_the_worst(tmp_path, capsys, monkeypatch):
    ns = script("auto_constants")
    runs = [[i] for i in range(20)]
    monkeypatch.setitem(ns["main"].__globals__, "steps_behind",
                        lambda make_policy, subset, *args: 1.5 if subset == runs[:len(subset)] else -0.5)
    payload = {"provenance": {"date": "today"}, "runs": runs, "new_tokens": 24, "k_max": 16,
               "costs_ms": {"1": {"regular": 5.0, "draft": 0.5, "verify5": 6.0}}}
    (tmp_path / "p.json").write_text(json.dumps(payload))
    ns["main"](["--json", str(tmp_path / "p.json"), "--pulls", "6", "--orders", "3", "--in-steps"])
    lines = capsys.readouterr().out.splitlines()
    assert "steps of the best fixed k" in lines[0]
    rows = [line for line in lines if "measured" in line or "verify slope" in line]
    assert len(rows) == 3 and all(row.split()[-4:] == ["+1.50/+0.17"] * 4 for row in rows)
    assert lines[-1].split() == ["+1.50"]


def test_auto_constants_refuses_a_policies_run_too_small_to_fill_a_batch_of_16(tmp_path, capsys):
    payload = {"provenance": {"date": "today"}, "runs": [[2] * 24] * 8, "new_tokens": 24, "k_max": 16,
               "costs_ms": {"1": {"regular": 5.0, "draft": 0.5, "verify5": 6.0}}}
    (tmp_path / "p.json").write_text(json.dumps(payload))
    with pytest.raises(SystemExit) as exit_:
        script("auto_constants")["main"](["--json", str(tmp_path / "p.json")])
    assert exit_.value.code == 2 and "holds 8 sequences" in capsys.readouterr().err


# --- scripts/auto_vs_best.py ---------------------------------------------------------------------------------

SECONDS = {"regular": [1.0] * 4, "1": [1.0] * 4, "2": [0.5, 1.0, 0.5, 1.0], "3": [1.0, 0.4, 1.0, 0.4],
           "4": [2.0] * 4, "auto": [0.8] * 4}


@pytest.mark.parametrize("argv", [["--rounds", "3"], ["--rounds", "0"], ["--batch-size", "0"]])
def test_auto_vs_best_refuses_rounds_that_cannot_be_halved_before_timing_anything(monkeypatch, argv):
    ns = script("auto_vs_best")

    def time_rounds(*args):
        raise AssertionError("timed")

    monkeypatch.setitem(ns["main"].__globals__, "time_rounds", time_rounds)
    with pytest.raises(SystemExit):
        ns["main"](argv)


def test_auto_vs_best_names_the_rounds_each_held_out_length_was_chosen_on(monkeypatch, capsys, tmp_path):
    """k = 2 is the fast one on rounds 1 and 3 (1-based), k = 3 on rounds 2 and 4."""
    ns = script("auto_vs_best")
    monkeypatch.setitem(ns["main"].__globals__, "time_rounds", lambda batch, rounds: SECONDS)
    ns["main"](["--rounds", "4", "--batch-size", "2", "--out", str(tmp_path / "o.json")])
    out = capsys.readouterr().out
    assert "1.250 (k = 2 chosen on the odd-numbered rounds), 1.250 (k = 3 chosen on the even-numbered rounds)" in out
    assert "auto / best in hindsight (k = 3, all rounds): 0.714" in out
    saved = json.loads((tmp_path / "o.json").read_text())
    assert saved["seconds"] == SECONDS and saved["rounds"] == 4 and saved["batch"] == 2


def test_auto_vs_best_times_regular_first_then_the_methods_in_an_order_rotated_each_round(monkeypatch):
    """Stand-ins for the pair, the decoders and the clock: each call advances the clock by a duration that
    names its method, so the seconds recorded show which method each time was filed under, and the calls
    show the order."""
    ns = script("auto_vs_best")
    clock = SimpleNamespace(now=0.0)
    order = []
    duration = {None: 100.0, 1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, "auto": 7.0}

    def generate(target, prompts, tokens, sampling=None):
        if tokens == 48:  # not the warm-up
            order.append(None)
            clock.now += duration[None]

    def speculative_generate(target, draft, prompts, tokens, sampling=None, draft_length=None):
        if tokens == 48:
            order.append(draft_length)
            clock.now += duration[draft_length]

    fake_minibass = SimpleNamespace(generate=generate, speculative_generate=speculative_generate,
                                    SamplingParams=lambda temperature: None)
    fake_zoo = SimpleNamespace(load_demo_pair=lambda: ("target", "draft", "tokenizer"),
                               demo_batches=lambda tokenizer, batch: [[[1]] * batch, [[2]] * batch])
    g = ns["time_rounds"].__globals__
    monkeypatch.setitem(g, "minibass", fake_minibass)
    monkeypatch.setitem(g, "zoo", fake_zoo)
    monkeypatch.setitem(g, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    seconds = ns["time_rounds"](2, 3)
    # two batches per method and round: twice the method's duration
    assert seconds == {m: [2 * duration[k]] * 3 for m, k in
                       [("regular", None), ("1", 1), ("2", 2), ("3", 3), ("4", 4), ("auto", "auto")]}
    per_round = [order[i:i + 12:2] for i in range(0, len(order), 12)]
    assert per_round == [[None, 1, 2, 3, 4, "auto"], [None, 2, 3, 4, "auto", 1], [None, 3, 4, "auto", 1, 2]]


# --- scripts/pair_acceptance.py ------------------------------------------------------------------------------

class _Model:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def parameters(self):
        return [torch.zeros(self.size)]


def test_pair_acceptance_times_drafts_against_the_same_rounds_target_step_in_rotated_order(monkeypatch, tmp_path):
    """Stand-ins for the tokenizer, the corpus, the acceptance runs and the timed calls. Every call is recorded;
    a round's target step takes 10, 20, 40 ms, draft a always 1/10 of it except in round 3 (1/2), draft b 1/5:
    each ratio is taken against its own round's step and the reported one is the median over the rounds. A
    cell's acceptance is the mean over its seeds' runs."""
    import transformers

    ns = script("pair_acceptance")
    g = ns["main"].__globals__
    texts = ["text one", "text two", "text three"]
    prompts_asked = []

    def held_out_prompts(tokenizer, some_texts, n, length):
        prompts_asked.append((len(some_texts), n, length))
        return [[7] * length] * n

    def acceptance_runs(target, draft, prompts, new_tokens, seeds):
        rate = 1.0 if draft is target else 0.5
        return {f"T={t},k={k}": [rate] if t == 0 else [rate - 0.1, rate + 0.1][:seeds]
                for t in (0, 1) for k in (2, 4, 6)}

    fake_train = SimpleNamespace(corpus_files=lambda: ([], ["f1", "f2", "f3"], None), read=lambda files: texts,
                                 held_out_prompts=held_out_prompts, acceptance_runs=acceptance_runs)
    models = {"target": _Model("target", 100), "a": _Model("a", 10), "b": _Model("b", 20)}
    steps = iter([10.0, 20.0, 40.0] + [80.0] * 9)  # a target call past the third would be an extra one
    calls = []

    def call_ms(model, batch, context, new):
        calls.append((model.name, batch, context, new))
        if model.name == "target":
            call_ms.step = next(steps)
            return call_ms.step
        share = {"a": 0.5 if call_ms.step == 40.0 else 0.1, "b": 0.2}[model.name]
        return share * call_ms.step

    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "from_pretrained", staticmethod(lambda path: "tok"))
    monkeypatch.setitem(g, "train", fake_train)
    monkeypatch.setitem(g, "minibass", SimpleNamespace(load_model=lambda path: models[Path(path).name]))
    monkeypatch.setitem(g, "call_ms", call_ms)
    monkeypatch.setitem(g, "provenance", lambda device: {"device": device})
    out = tmp_path / "acc.json"
    ns["main"](["--target", "target", "--draft", "a", "b", "--rounds", "3", "--batch", "3",
                "--prompts", "every-file", "--seeds", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert prompts_asked == [(1, 2, 24)] * 3 and result["prompts"] == 6 and result["prompt_set"] == "every-file"
    assert [name for name, *_ in calls] == ["target", "a", "b", "target", "b", "a", "target", "a", "b"]
    assert {tuple(rest) for _, *rest in calls} == {(3, 64, 1)}  # --batch, over a 64-token cache, 1 new token
    a, b = result["drafts"]["a"], result["drafts"]["b"]
    assert a["draft_call_over_target_step"] == {"batch": 3, "median": 0.1, "rounds": [0.1, 0.1, 0.5]}
    assert b["draft_call_over_target_step"]["rounds"] == [0.2, 0.2, 0.2]
    assert a["acceptance"]["T=1,k=4"] == {"mean": 0.5, "runs": [0.4, 0.6]} and a["parameters"] == 10
