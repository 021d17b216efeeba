"""The benchmarks' arithmetic and plumbing, with the clock replaced by scripted durations: which way a
ratio goes, which run is the median, which model a forward clock watches, what the provenance records,
how the policy replay prices a step, which options reach ``run``, and what the tables print. No test
here times anything: every duration is made up, so every expected number is exact."""

from __future__ import annotations

import datetime
import json
import platform
import statistics
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import minibass
from minibass import zoo
from minibass.bench import attention, common, decode, peers, policies, speculative
from minibass.bench.policies import CallCosts, compare, iid_runs, measure_costs, replay
from minibass.draft_length import parse_draft_length
from conftest import ROOT, script
from test_bench import usage_error



@pytest.fixture(scope="module")
def demo_pair():
    return zoo.load_demo_pair()


def scripted_timed(durations):
    """A stand-in for ``common.timed``: runs the call and says it took the next of ``durations``."""
    durations = iter(durations)

    def timed(fn, *, device):
        return next(durations), fn()

    return timed


def recorded_clock(seconds, watched):
    """A stand-in for ``common.forward_clock``: records the models it watches and reports the next of
    ``seconds`` as the time spent inside their forward calls."""
    seconds = iter(seconds)

    @contextmanager
    def clock(*models, device):
        watched.append(models)
        yield {"seconds": next(seconds)}

    return clock


def capture_run(module, monkeypatch) -> list:
    """Replaces ``module.run`` by a recorder of its arguments (a list of (args, kwargs))."""
    calls = []
    monkeypatch.setattr(module, "run", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(common, "COMMAND", None)
    return calls


# common.py: rates, provenance, timing helpers


def test_a_rate_of_zero_is_shown_as_zero_and_a_missing_one_as_a_dash():
    assert common.rate_text(0.0) == "0.00"
    assert common.rate_text(None) == "-"
    assert common.rate_text(0.456) == "0.46"


def test_the_provenance_records_each_packages_own_version_and_a_utc_date(monkeypatch):
    import transformers

    monkeypatch.setattr(common, "COMMAND", "python -m minibass.bench decode --reps 2")
    made = common.provenance("cpu")
    assert made["torch"] == torch.__version__ and made["transformers"] == transformers.__version__
    assert made["python"] == platform.python_version()
    assert made["command"] == "python -m minibass.bench decode --reps 2"
    date = datetime.datetime.fromisoformat(made["date"])
    assert date.utcoffset() == datetime.timedelta(0)  # UTC, said so in the string: comparable across machines
    assert made["device"].endswith("CPU, " + common.cpu_threads())


def test_the_provenance_of_any_cuda_device_names_that_gpu(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: asked.append(device) or "Example GPU 80GB")
    assert common.provenance("cuda:1")["device"] == "Example GPU 80GB"
    assert asked == [torch.device("cuda:1")]


def test_the_cpu_model_is_read_from_the_model_name_line(tmp_path, monkeypatch):
    """/proc/cpuinfo has a "model" line (a number) before the "model name" line (the name)."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineExample\ncpu family\t: 6\nmodel\t\t: 85\n"
                    "model name\t: Example(R) CPU @ 2.00GHz\nstepping\t: 7\n")
    real = common.Path
    monkeypatch.setattr(common, "Path", lambda path: info if path == "/proc/cpuinfo" else real(path))
    assert common.cpu_model() == "Example(R) CPU @ 2.00GHz"
    info.unlink()
    assert common.cpu_model() is None  # not Linux: no model


def test_timed_waits_for_the_gpu_on_both_sides_of_the_call(monkeypatch):
    """On a GPU a call returns before its kernels finish: the clock stops only after a synchronisation."""
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: events.append("sync"))
    _, result = common.timed(lambda: events.append("call") or 7, device="cuda:0")
    assert events == ["sync", "call", "sync"] and result == 7
    events.clear()
    common.timed(lambda: events.append("call"), device="cpu")
    assert events == ["call"]


def test_median_timed_reports_the_median_call_and_the_last_result(monkeypatch):
    results = iter(range(5))
    monkeypatch.setattr(common, "timed", scripted_timed([3.0, 1.0, 2.0, 5.0, 4.0]))
    seconds, last = common.median_timed(lambda: next(results), device="cpu", reps=5)
    assert (seconds, last) == (3.0, 4)


class Doubler:
    """A model as forward_clock sees one: a ``forward`` method on its class."""

    def __init__(self):
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return 2 * x


def test_forward_clock_adds_up_every_call_of_every_watched_model_and_only_theirs(monkeypatch):
    monkeypatch.setattr(common, "timed", lambda fn, *, device: (0.25, fn()))  # every forward call: 0.25 s
    a, b, unwatched = Doubler(), Doubler(), Doubler()
    with common.forward_clock(a, b, device="cpu") as spent:
        assert a.forward(1) + a.forward(2) + b.forward(3) + unwatched.forward(4) == 2 + 4 + 6 + 8
    assert spent["seconds"] == 0.75 and (a.calls, b.calls, unwatched.calls) == (2, 1, 1)
    assert "forward" not in vars(a) and "forward" not in vars(b)  # the class's method again
    with common.forward_clock(a, device="cpu") as again:
        a.forward(1)
    assert again["seconds"] == 0.25 and spent["seconds"] == 0.75  # a new clock counts from zero, once per call


def test_forward_clock_counts_a_model_named_twice_once(monkeypatch):
    monkeypatch.setattr(common, "timed", lambda fn, *, device: (0.25, fn()))
    a = Doubler()
    with common.forward_clock(a, a, device="cpu") as spent:
        assert a.forward(1) == 2
    assert spent["seconds"] == 0.25 and a.calls == 1 and "forward" not in vars(a)


def tiny_llama(folder, seed=0):
    return common.random_llama(folder, layers=1, hidden=32, heads=2, kv_heads=1, vocab=64, seed=seed,
                               max_positions=128)


def test_call_ms_takes_the_median_of_the_calls_after_the_warm_up(tmp_path, monkeypatch):
    model = minibass.load_model(tiny_llama(tmp_path / "m"))
    cache = common.filled_cache(model, 2, 5, 8)
    # per call: 3 warm-up calls of 0.1 ms, then 3 timed calls of 3, 1 and 2 ms
    durations = [1e-4] * 3 + [3e-3, 1e-3, 2e-3]
    stamps = iter([t for d in durations for t in (0.0, d)])
    monkeypatch.setattr(common, "time", SimpleNamespace(perf_counter=lambda: next(stamps)))
    assert common.call_ms(model, 2, 5, 3, reps=3, cache=cache) == pytest.approx(2.0)
    assert cache.lengths.tolist() == [5, 5]


def test_call_ms_times_the_calls_under_inference_mode_as_the_loops_make_them(tmp_path, monkeypatch):
    """Every call runs under inference mode, as ``generate`` and ``speculative_generate`` make it; the cache's
    lengths are rolled back outside it, so the caller's cache keeps ordinary tensors."""
    model = minibass.load_model(tiny_llama(tmp_path / "m"))
    cache = common.filled_cache(model, 2, 5, 8)
    modes = []
    forward = type(model).forward
    monkeypatch.setattr(type(model), "forward",
                        lambda self, *a, **kw: modes.append(torch.is_inference_mode_enabled()) or forward(self, *a, **kw))
    common.call_ms(model, 2, 5, 3, reps=3, cache=cache)
    assert modes == [True] * 6 and not cache.lengths.is_inference()


def test_call_costs_price_draft_and_verify_as_per_round_ratios_to_the_median_regular_step(monkeypatch):
    """A slow spell lasts a round: each round's draft and verify are divided by that round's regular step."""
    target, draft = object(), object()
    script = {("regular",): [10.0, 20.0, 40.0], ("draft",): [1.0, 4.0, 4.0], ("verify",): [12.0, 30.0, 44.0]}
    seen = {key: iter(values) for key, values in script.items()}

    def call_ms(model, batch, context, new, *, reps, cache):
        name = "draft" if model is draft else "verify" if new == 5 else "regular"
        return next(seen[(name,)])

    monkeypatch.setattr(common, "filled_cache", lambda *args: None)
    monkeypatch.setattr(common, "call_ms", call_ms)
    costs = common.call_costs(target, draft, 4, 5, rounds=3)
    assert costs["regular"] == 20.0
    assert costs["draft"] == pytest.approx(20.0 * 0.1)  # ratios 0.1, 0.2, 0.1
    assert costs["verify"] == pytest.approx(20.0 * 1.2)  # ratios 1.2, 1.5, 1.1


# decode.py


def test_decode_reports_transformers_time_over_minibass_time_from_the_median_runs(tmp_path, monkeypatch):
    """Per repetition: transformers, then each backend. transformers takes 4, 2, 3 s (median 3); padded
    2, 1, 3 s with 0.2, 0.5, 0.9 s inside its forward calls: its median run is the 2 s one."""
    monkeypatch.setattr(decode, "random_llama", tiny_llama)
    monkeypatch.setattr(decode, "timed", scripted_timed([4.0, 2.0, 2.0, 1.0, 3.0, 3.0]))
    watched = []
    monkeypatch.setattr(decode, "forward_clock", recorded_clock([0.0, 0.2, 0.0, 0.5, 0.0, 0.9], watched))
    out = tmp_path / "decode.json"
    decode.run([2], 3, 4, ["padded"], "cpu", torch.float32, out, reps=3)
    payload = json.loads(out.read_text())
    (row,) = payload["rows"]
    assert row["transformers_tok_s"] == pytest.approx(2 * 3 / 3.0)
    assert row["minibass_padded_tok_s"] == pytest.approx(2 * 3 / 2.0)
    assert row["minibass_padded_ratio"] == pytest.approx(3.0 / 2.0)  # > 1: minibass is faster
    assert row["minibass_padded_step_ms"] == {"forward": pytest.approx(1e3 * 0.2 / 3),
                                              "other": pytest.approx(1e3 * 1.8 / 3)}
    assert len(watched) == 6 and all(models == (watched[0][0],) for models in watched)
    assert isinstance(watched[0][0], minibass.Decoder)  # minibass's model, not transformers'
    assert {"device", "torch", "transformers", "date", "command"} <= set(payload["provenance"])


def test_decode_passes_its_options_on_and_picks_the_cpu_backends(monkeypatch, capsys):
    calls = capture_run(decode, monkeypatch)
    decode.main([])
    (args, _), = calls
    assert args[3] == ["default", "naive", "padded", "split"]  # not the interpreted ragged kernel on a CPU
    assert args[-1] == 5
    calls.clear()
    decode.main(["--backends", "default", "padded", "--reps", "2", "--batch-sizes", "3", "--new-tokens", "7",
                 "--prompt-len", "9", "--dtype", "bfloat16"])
    (args, _), = calls
    assert args[:6] == ([3], 7, 9, ["default", "padded"], "cpu", torch.bfloat16) and args[-1] == 2


# attention.py


def test_quick_attention_runs_a_few_small_cells_with_two_reps(monkeypatch):
    calls = capture_run(attention, monkeypatch)
    attention.main(["--quick"])
    (args, _), = calls
    assert args[1:5] == ([1, 8], [4], [0.0, 0.95], 2)
    calls.clear()
    attention.main(["--batches", "2", "3", "--new-tokens", "1", "--spreads", "0.5", "--reps", "4"])
    (args, _), = calls
    assert args[1:5] == ([2, 3], [1], [0.5], 4)


def test_a_spread_of_one_or_more_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(attention, "run", lambda *a, **k: pytest.fail("ran with a bad --spreads"))
    for bad in ("1", "1.5", "x"):
        assert "--spreads: expected a number in [0, 1)" in usage_error(["attention", "--spreads", bad], capsys)


def test_ragged_lengths_spread_both_ways_around_the_mean_and_hold_the_new_tokens():
    q, kv = attention.ragged_lengths(64, 4, 256, 0.0)
    assert q.tolist() == [4] * 64 and kv.tolist() == [256] * 64
    _, kv = attention.ragged_lengths(64, 4, 256, 0.5)
    assert 128 <= kv.min() < 256 < kv.max() <= 384
    assert abs(kv.float().mean() - 256) < 0.1 * 256
    _, kv = attention.ragged_lengths(16, 200, 256, 0.95)
    assert kv.min() == 200  # a cache holds at least the new tokens
    assert attention.ragged_lengths(8, 4, 256, 0.5)[1].tolist() == attention.ragged_lengths(8, 4, 256, 0.5)[1].tolist()


def test_each_backends_row_has_its_own_waste_and_bandwidth(tmp_path, monkeypatch):
    from minibass.attention import cost

    monkeypatch.setattr(attention, "median_time", lambda fn, device, reps: 2e-3)
    payload = attention.run("cpu", [4], [3], [0.5], 1, tmp_path / "a.json", None)
    (row,) = payload["rows"]
    shape = attention.CPU_SHAPE
    c = cost(torch.full((4,), 3), torch.tensor(row["kv_lens"]), n_heads=shape["n_heads"],
             n_kv_heads=shape["n_kv_heads"], head_dim=shape["head_dim"], bytes_per_element=4)
    assert len({c.waste(name) for name in ("naive", "padded", "split")}) > 1  # (else the check below is idle)
    for name, entry in row["backends"].items():
        assert entry["ms"] == pytest.approx(2.0)
        assert entry["waste"] == pytest.approx(c.waste(name)) and entry["launches"] == c.launches[name]
        assert entry["gb_per_s"] == pytest.approx(c.bytes[name] / 2e-3 / 1e9)
    assert json.loads((tmp_path / "a.json").read_text())["rows"][0]["kv_lens"] == row["kv_lens"]


def test_attention_times_a_cell_by_the_median_of_its_calls_after_a_warm_up(monkeypatch):
    calls = []
    monkeypatch.setattr(attention, "timed", scripted_timed([3.0, 1.0, 2.0]))
    assert attention.median_time(lambda: calls.append(1), "cpu", 3) == 2.0
    assert len(calls) == 4  # the warm-up, then three timed calls


# speculative.py


def test_speculative_speedup_is_regular_time_over_speculative_time_from_the_median(tmp_path, monkeypatch, demo_pair):
    """Per repetition: a regular run, then the speculative one. Regular 3, 4, 6 s; speculative 1.5, 2, 1 s
    with 0.3, 0.4, 0.5 s inside the two models' forward calls. Speed-ups 2, 2, 6: the median is 2; the
    median speculative run is the 1.5 s one."""
    target, draft, tokenizer = demo_pair
    prompt = tokenizer.encode(zoo.demo_prompts(1)[0], add_special_tokens=False)
    monkeypatch.setattr(speculative, "load_pair", lambda device, dtype: (target, draft, "demo", lambda b: [prompt] * b))
    monkeypatch.setattr(speculative, "timed", scripted_timed([3.0, 1.5, 4.0, 2.0, 6.0, 1.0]))
    watched = []
    monkeypatch.setattr(speculative, "forward_clock", recorded_clock([0.3, 0.4, 0.5], watched))
    out = tmp_path / "s.json"
    speculative.run("cpu", [2], [2], ["padded"], 4, 0.0, out, None, reps=3)
    (row,) = json.loads(out.read_text())["rows"]
    (cell,) = row["runs"]
    assert cell["speedup"] == pytest.approx(2.0)  # > 1: speculative decoding is faster
    assert cell["tok_s"] == pytest.approx(2 * 4 / 1.5)
    assert cell["regular_tok_s"] == pytest.approx(2 * 4 / 4.0)
    assert row["regular_tok_s"] == pytest.approx(2 * 4 / 4.0)
    assert cell["outside_forward_share"] == pytest.approx(1 - 0.3 / 1.5)
    assert watched == [(target, draft)] * 3  # both models' forward calls count as inside


def test_speculative_passes_its_options_on(monkeypatch):
    calls = capture_run(speculative, monkeypatch)
    speculative.main(["--draft-lengths", "1", "dynamic", "auto", "--reps", "2", "--backends", "split",
                      "--new-tokens", "6", "--temperature", "0.5", "--batch-sizes", "2"])
    (args, _), = calls
    assert args[:6] == ("cpu", [2], [1, "dynamic", "auto"], ["split"], 6, 0.5) and args[-1] == 2
    calls.clear()
    speculative.main([])
    (args, _), = calls
    assert args[2] == [1, 2, 4, "dynamic", "auto"] and args[3] == ["naive", "padded", "split"] and args[-1] == 3


def test_the_cost_model_prediction_uses_the_runs_own_steps_costs_and_regular_rate():
    """One sequence; a regular step of 1 s (1 tok/s); k = 2 with free drafts and every draft token kept,
    10 steps after the prefill, each costing a verify of 0.8 s plus 0.1 s of acceptance and 0.1 s of
    roll-back: every step costs a regular step and yields 3 tokens."""
    row = {"batch": 1, "regular_tok_s": 0.5}  # the batch's pooled regular runs: not this cell's
    run = {"draft_length": 2, "target_calls": 11, "mean_draft_length": 2.0, "mean_accepted_per_step": 2.0,
           "regular_tok_s": 1.0, "time_split_s": {"draft": 0.0, "verify": 8.0, "accept": 1.0, "rollback": 1.0}}
    assert speculative.predicted_speedup(row, run) == pytest.approx(3.0)
    assert speculative.predicted_speedup(row, {**run, "draft_length": "dynamic"}) is None
    assert speculative.predicted_speedup(row, {**run, "target_calls": 1}) is None  # the prefill only


# peers.py


def test_peers_reports_each_method_against_transformers_generate_from_the_median_round(tmp_path, monkeypatch):
    """Per round: hf_generate, hf_assisted, mb_generate, mb_speculative. hf_generate takes 3, 4, 2 s
    (median 3), mb_generate 1.5, 1, 2 s (median 1.5): 2x. hf_assisted's greedy output is altered."""
    seconds = {0: [3.0, 4.0, 2.0], 1: [6.0, 6.0, 6.0], 2: [1.5, 1.0, 2.0], 3: [1.0, 1.0, 1.0]}
    count = iter(range(10**6))

    def timed(fn, *, device):
        i = next(count)
        method, round_ = i % 4, (i // 4) % 3
        out = fn()
        return seconds[method][round_], ([[-1]] if method == 1 else out)

    monkeypatch.setattr(peers, "timed", timed)
    out = tmp_path / "p.json"
    peers.run("cpu", [1], 2, "padded", out, None, reps=3, draft_length=2)
    payload = json.loads(out.read_text())
    greedy, sampled = payload["rows"]
    assert (greedy["temperature"], sampled["temperature"]) == (0.0, 0.8)
    for row in (greedy, sampled):
        assert row["hf_generate_tok_s"] == pytest.approx(2 / 3.0)
        assert row["mb_generate_tok_s"] == pytest.approx(2 / 1.5)
        assert row["mb_generate_vs_hf_generate"] == pytest.approx(2.0)
        assert row["hf_assisted_vs_hf_generate"] == pytest.approx(0.5)
        assert row["hf_generate_vs_hf_generate"] == 1.0
    assert greedy["greedy_identical"] == {"hf_generate": True, "hf_assisted": False, "mb_generate": True,
                                          "mb_speculative": True}
    assert "greedy_identical" not in sampled
    assert payload["draft_length"] == 2 and payload["attention"] == "padded"


def test_the_peers_table_names_the_methods_whose_greedy_output_differs():
    row = {"temperature": 0.0, "batch": 1, "greedy_identical": {"hf_generate": True, "hf_assisted": False,
                                                                "mb_generate": True, "mb_speculative": True}}
    row.update({f"{n}_tok_s": 10.0 for n in peers.METHODS})
    row.update({f"{n}_vs_hf_generate": 1.0 for n in peers.METHODS})
    table = peers.markdown_table({"rows": [row, {**row, "greedy_identical": dict.fromkeys(peers.METHODS, True)}]})
    lines = table.splitlines()
    assert lines[2].endswith("| hf_assisted differ |") and lines[3].endswith("| yes |")


def test_peers_passes_its_options_on_and_asks_the_device_for_its_default_backend(monkeypatch):
    calls = capture_run(peers, monkeypatch)
    monkeypatch.setattr(minibass.attention, "default_backend", lambda device: "split")
    peers.main(["--draft-length", "3", "--reps", "2", "--new-tokens", "5", "--batch-sizes", "2", "4"])
    (args, _), = calls
    assert args[:4] == ("cpu", [2, 4], 5, "split") and args[-2:] == (2, 3)
    calls.clear()
    peers.main(["--draft-length", "dynamic", "--attention", "naive"])
    (args, _), = calls
    assert args[3] == "naive" and args[-1] == "dynamic"


# policies.py


def test_call_costs_interpolate_between_probes_and_grow_beyond_the_largest():
    costs = CallCosts({5: {"regular": 3.0, "draft": 0.5, "verify5": 4.0},
                       1: {"regular": 1.0, "draft": 0.1, "verify5": 2.0}})
    assert costs.regular(1) == 1.0 and costs.regular(5) == 3.0
    assert costs.regular(2) == pytest.approx(1.5) and costs.draft(4) == pytest.approx(0.4)
    assert costs.regular(10) == pytest.approx(6.0)  # beyond the probes: in proportion to the batch
    assert costs.verify(1, 0) == 1.0 and costs.verify(1, 4) == pytest.approx(2.0)
    assert costs.verify(1, 2) == pytest.approx(1.5)  # a line through 1 and 5 tokens per sequence


def test_replay_prices_each_step_at_the_batch_still_running():
    """Two sequences, k = 1: the first keeps every draft token and finishes after two steps, the second
    keeps none; a step at batch 2 costs twice one at batch 1. The last step has no budget left to draft."""
    costs = CallCosts({1: {"regular": 1.0, "draft": 0.1, "verify5": 1.4},
                       2: {"regular": 2.0, "draft": 0.2, "verify5": 2.8}})
    result = replay(1, [[1, 1, 1, 1], [0, 0, 0, 0]], 4, costs, 4)
    assert result["draft_lengths"] == [1, 1, 1, 0]
    assert result["accepted"] == [[1, 0], [1, 0], [-1, 0], [-1, 0]]
    # batch 2: 0.2 + (2 + 0.2); batch 1: 0.1 + (1 + 0.1), then a plain target step of 1
    assert result["seconds"] == pytest.approx(2.4 + 2.4 + 1.2 + 1.0)


def test_replay_drafts_what_the_policy_asks_whatever_the_runs_hold():
    costs = CallCosts({1: {"regular": 1.0, "draft": 0.1, "verify5": 1.4}})
    result = replay(3, [[0] * 6], 6, costs, 8)  # nothing will be accepted: the policy cannot know that
    assert result["draft_lengths"] == [3, 3, 3, 2, 1, 0] and result["steps"] == 6


def test_replay_tells_the_policy_only_about_the_sequences_that_drafted():
    class Recording:
        def __init__(self):
            self.updates = []

        def lengths(self, active):
            return [2] * len(active)

        def update(self, active, proposed, accepted):
            self.updates.append((list(active), list(proposed), list(accepted)))

    policy = Recording()
    costs = CallCosts({1: {"regular": 1.0, "draft": 0.1, "verify5": 1.4}})
    replay(policy, [[2] * 5, [0] * 5], 5, costs, 4)
    # step 1: both draft 2; step 2: the first has budget for 1 more draft token, the second 2; steps 3
    # and 4: the second alone; step 5: the second's last token, with no budget to draft: no update
    assert policy.updates == [([0, 1], [2, 2], [2, 0]), ([0, 1], [1, 2], [1, 0]), ([1], [2], [0]), ([1], [1], [0])]


def test_replay_lets_auto_measure_the_costs_it_chooses_by():
    """Without costs given, ``auto`` tries k = 1 and 3 until it has heard what the steps cost; on cheap
    drafts that are always kept it then drafts longer."""
    runs = [[16] * 40, [16] * 40]
    result = replay("auto", runs, 40, CallCosts(policies.GPU_LIKE), 16)
    assert result["draft_lengths"][:4] == [1, 3, 1, 3] and max(result["draft_lengths"]) > 3


def test_compare_reports_regular_time_over_replayed_time_per_whole_group():
    costs = CallCosts({1: {"regular": 1.0, "draft": 0.1, "verify5": 1.4},
                       2: {"regular": 1.5, "draft": 0.15, "verify5": 2.1}})
    runs = [[3] * 8, [2] * 8, [0] * 8, [1] * 8, [3] * 8]  # five sequences: two whole groups of two
    (row,) = compare(runs, 8, costs, [2], [2], 4)
    assert row["groups"] == 2
    replayed = [replay(2, runs[i:i + 2], 8, costs, 4)["seconds"] for i in (0, 2)]
    assert row["speedup"]["2"] == pytest.approx(statistics.mean(8 * 1.5 / s for s in replayed))
    assert row["speedup"]["2"] > 1 and row["mean_draft_length"]["2"] <= 2


def test_iid_runs_count_the_accepted_tokens_before_the_first_rejection():
    runs = iid_runs(0.5, 64, 32, 8)
    assert len(runs) == 64 and all(len(r) == 32 and all(0 <= n <= 8 for n in r) for r in runs)
    mean = statistics.mean(n for r in runs for n in r)
    assert mean == pytest.approx(sum(0.5 ** j for j in range(1, 9)), abs=0.1)  # 0.996
    assert iid_runs(1.0, 2, 3, 4) == [[4] * 3] * 2 and iid_runs(0.0, 2, 3, 4) == [[0] * 3] * 2


def test_measure_costs_keeps_each_probe_in_its_own_field_in_seconds(monkeypatch):
    monkeypatch.setattr(policies, "call_costs", lambda target, draft, batch, k, **kw: {
        "regular": 10.0 * batch, "draft": 1.0 * batch, "verify": 12.0 * batch})
    costs = measure_costs(None, None, [1, 4])
    assert costs.probes == {1: {"regular": 0.01, "draft": 0.001, "verify5": 0.012},
                            4: {"regular": 0.04, "draft": 0.004, "verify5": 0.048}}


def test_policies_refuses_a_fixed_length_beyond_k_max_before_loading_anything(monkeypatch, capsys):
    monkeypatch.setattr(common, "COMMAND", None)
    monkeypatch.setattr(zoo, "load_demo_pair", lambda *a, **k: pytest.fail("loaded the pair for a bad command"))
    message = usage_error(["policies", "--draft-lengths", "2", "40", "--k-max", "32"], capsys)
    assert "fixed draft lengths up to --k-max 32" in message


def test_made_up_policy_replays_write_only_the_files_named_for_them(monkeypatch, tmp_path):
    calls = capture_run(policies, monkeypatch)
    policies.main(["--iid", "0.8"])
    (args, kwargs), = calls
    assert args[4:6] == (None, None) and kwargs == {"iid": 0.8, "gpu_like": False}
    calls.clear()
    policies.main(["--gpu-like", "--out", str(tmp_path / "mine.json")])
    (args, kwargs), = calls
    assert args[4:6] == (tmp_path / "mine.json", None) and kwargs == {"iid": None, "gpu_like": True}
    calls.clear()
    policies.main(["--draft-lengths", "2", "auto", "--k-max", "8", "--new-tokens", "12", "--batch-sizes", "2"])
    (args, kwargs), = calls
    assert args[:4] == ([2], [2, "auto"], 12, 8) and all(isinstance(p, Path) for p in args[4:6])


def test_policies_refuses_a_bad_draft_length_before_loading_anything(monkeypatch, capsys):
    monkeypatch.setattr(common, "COMMAND", None)
    monkeypatch.setattr(zoo, "load_demo_pair", lambda *a, **k: pytest.fail("loaded the pair for a bad command"))
    assert "draft_length must be an int >= 1" in usage_error(["policies", "--draft-lengths", "0"], capsys)


def test_policies_refuses_a_draft_length_that_is_not_a_plain_number_or_a_name_as_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(common, "COMMAND", None)
    monkeypatch.setattr(zoo, "load_demo_pair", lambda *a, **k: pytest.fail("loaded the pair for a bad command"))
    assert "draft_length must be an int >= 1" in usage_error(["policies", "--draft-lengths", "2", "\u00b2"], capsys)


@pytest.mark.parametrize("lengths, k_max, says", [(["dynamic"], "31", "'dynamic' may draft 32"),
                                                  (["per-sequence"], "6", "'per-sequence' may draft 32"),
                                                  (["2", "auto"], "8", "'auto' may draft 16: give --k-max 16")])
def test_policies_refuses_a_policy_that_may_draft_beyond_k_max_before_loading_anything(monkeypatch, capsys,
                                                                                       lengths, k_max, says):
    monkeypatch.setattr(common, "COMMAND", None)
    monkeypatch.setattr(zoo, "load_demo_pair", lambda *a, **k: pytest.fail("loaded the pair for a bad command"))
    assert says in usage_error(["policies", "--draft-lengths", *lengths, "--k-max", k_max], capsys)


def test_policies_replays_every_named_policy_within_k_max(monkeypatch, capsys):
    """Made-up runs at GPU-like costs: the pair is never needed, and each policy replays within its k_max."""
    monkeypatch.setattr(zoo, "load_demo_pair", lambda *a, **k: (None, None, None))
    for lengths, k_max, longest in ((["dynamic", "per-sequence"], 32, [32, 32]), (["auto", "3"], 16, [16, 3])):
        assert [policies.longest_draft(parse_draft_length(p)) for p in lengths] == longest
        policies.run([1], [parse_draft_length(p) for p in lengths], 4, k_max, None, None, iid=0.5, gpu_like=True)
        header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("batch  groups"))
        assert header.split()[2:] == [("k=" + p) if p.isdigit() else p for p in lengths]


@pytest.mark.parametrize("alpha", ["1.5", "-0.1", "nan", "half"])
def test_policies_refuses_an_iid_acceptance_outside_zero_to_one(monkeypatch, capsys, alpha):
    monkeypatch.setattr(common, "COMMAND", None)
    monkeypatch.setattr(policies, "run", lambda *a, **k: pytest.fail("ran with a bad --iid"))
    assert "--iid" in usage_error(["policies", "--iid", alpha], capsys)


def test_policies_takes_an_iid_acceptance_of_zero_or_one(monkeypatch):
    calls = capture_run(policies, monkeypatch)
    for alpha in (0.0, 1.0):
        policies.main(["--iid", str(alpha)])
        assert calls.pop()[1]["iid"] == alpha


# scripts/bench_tables.py


@pytest.fixture(scope="module")
def tables():
    return script("bench_tables")


def test_the_lines_under_the_tables_are_on_the_benchmark_page_too(tables):
    """The decode table's per-step split and the policies table's call costs are prose lines, not rows."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    decode_lines = tables["decode_table"](tables["load"]("decode", "cpu")).splitlines()
    policies_lines = tables["policies_table"](tables["load"]("policies", "cpu")).splitlines()
    prose = [line for line in decode_lines + policies_lines if line and not line.startswith("|")]
    assert [line.split(":")[0] for line in prose] == ["Per decoding step with the default backend (forward calls + "
                                                      "everything else)", "Call costs (draft and verify in regular steps)"]
    assert all(line in page for line in prose), prose


def test_the_tables_script_heads_each_table_with_its_own_provenance(tables, capsys):
    tables["main"](["--device", "cpu"])
    out = capsys.readouterr().out
    for name in ("decode", "attention", "speculative", "peers", "policies"):
        p = json.loads((ROOT / "bench_results" / f"{name}-cpu.json").read_text())["provenance"]
        assert f"### {name} ({p['device']}, torch {p['torch']}, {p['date']})\n" in out


def test_the_peers_and_policies_tables_judge_every_method_and_mark_the_best_fixed_length(tables):
    row = {"temperature": 0.0, "batch": 1, "greedy_identical": {"hf_generate": True, "hf_assisted": False,
                                                                "mb_generate": True, "mb_speculative": True}}
    row.update({f"{n}_tok_s": 10.0 for n in peers.METHODS})
    row.update({f"{n}_vs_hf_generate": 1.0 for n in peers.METHODS})
    assert tables["peers_table"]({"rows": [row]}).splitlines()[-1].endswith("| no |")
    policies_payload = {"rows": [{"batch": 4, "groups": 3, "speedup": {"1": 1.2, "2": 1.4, "auto": 1.5}}],
                        "costs_ms": {"4": {"regular": 2.0, "draft": 0.2, "verify5": 3.0}}}
    lines = tables["policies_table"](policies_payload).splitlines()
    assert lines[2] == "| 4 | 3 | 1.20x | **1.40x** | 1.50x |"
    assert lines[-1].endswith("batch 4: regular 2.00 ms, draft 0.10, verify of 5 1.50.")


@pytest.mark.parametrize("name", ["attention", "speculative", "peers", "policies"])
def test_a_benchmarks_plot_is_written_from_its_committed_json_and_its_figure_closed(name, tmp_path):
    import importlib

    plt = common.pyplot()
    plt.close("all")
    payload = json.loads((ROOT / "bench_results" / f"{name}-cpu.json").read_text())
    path = importlib.import_module(f"minibass.bench.{name}").make_plot(payload, tmp_path / f"{name}.png")
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []
