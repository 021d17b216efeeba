"""Edges of the demo's arithmetic: the numbers it prints, checked exactly.

The demo's decoding, its forward-call clocks and its cost probes are replaced by stand-ins that return scripted
results (hand-built ``GenerationStats``), so that every ratio, median, round and prediction it prints is known in
advance and nothing is timed; the pure helpers (``_merged``, ``_schedule``, ``_all_rounds_fit``, ``_reading``)
are called with made-up values."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

import pytest
import torch

import minibass
from minibass import __main__ as cli
from minibass import zoo
from minibass.bench import common
from minibass.generate import GenerationResult, GenerationStats

# --- a scripted demo -----------------------------------------------------------------------------------------------

GROUPS = [[[1, 2], [3, 4, 5]], [[6], [7, 8]]]  # two batches of two prompts (1-3 tokens)
NEW = 8  # --max-new-tokens: 16 new tokens a batch, 32 a round


def _tokens(group):
    return [[100 * group + 10 * i + j for j in range(NEW)] for i in range(2)]


def _stats(*, steps, wall, calls=None, lengths=(), accepted=0, speculative=True):
    """One batch's run of two sequences."""
    return GenerationStats(steps=steps, target_calls=steps + 1 if calls is None else calls, draft_calls=sum(lengths),
                           draft_lengths=list(lengths), proposed_tokens=2 * sum(lengths), accepted_tokens=accepted,
                           sequence_steps=2 * steps if speculative else 0, new_tokens=2 * NEW, wall_time=wall,
                           speculative=speculative)


# Wall seconds of a whole round (two batches, each half of it). Regular decoding: 2, 1, 4 s (32 tokens: 16, 32, 8
# tokens/s, the median is round 0's). The policies' walls are the regular ones over these per-round ratios:
#   k = 1: 1.25, 1.6, 2.0 (median 1.6, round 1)    k = 2: 4.0, 2.5, 3.2 (median 3.2, round 2)
#   k = 3: 3.125, 2.0, 2.5 (median 2.5, round 2)   dynamic: 4.0, 5.0, 6.4 (median 5.0, round 1)
# so the fixed length with the highest speed-up is k = 2 (neither the first nor the last), dynamic is faster
# still, and no method's median-ratio round is its median round by tokens/s.
REGULAR_WALL = [2.0, 1.0, 4.0]
WALL = {"1": [1.6, 0.625, 2.0], "2": [0.5, 0.4, 1.25], "3": [0.64, 0.5, 1.6], "dynamic": [0.5, 0.2, 0.625]}
# Per round, per batch: steps and draft tokens accepted (and for dynamic the draft lengths of each step).
STEPS = {"1": [(5, 5), (6, 5), (4, 4)], "2": [(3, 3), (4, 3), (3, 2)], "3": [(2, 2), (3, 3), (3, 2)]}
ACCEPTED = {"1": [(6, 6), (4, 4), (7, 7)], "2": [(9, 9), (4, 3), (8, 4)], "3": [(10, 10), (6, 6), (9, 6)],
            "dynamic": [(2, 2), (8, 5), (1, 1)]}
DYNAMIC = [([2, 2], [6]), ([1, 3, 5], [4, 2]), ([1, 1], [1, 7])]


def scripted(name, rnd, group):
    """(stats, target forward seconds, draft forward seconds) of one batch's run in one round."""
    if name == "regular":
        wall = REGULAR_WALL[rnd] / 2
        return _stats(steps=NEW, calls=NEW + rnd, wall=wall, speculative=False), 0.9 * wall, 0.0
    wall = WALL[name][rnd] / 2
    lengths = DYNAMIC[rnd][group] if name == "dynamic" else [int(name)] * STEPS[name][rnd][group]
    stats = _stats(steps=len(lengths), wall=wall, lengths=lengths, accepted=ACCEPTED[name][rnd][group])
    if (name, rnd) == ("2", 2):  # the round the reading explains: 0.75 s in the target, 0.4 s in the draft, 0.1 s host
        return stats, 0.375, 0.2
    return stats, wall / 2, wall / 4


# Milliseconds of a regular step, a verify of k + 1 tokens and a draft call at each batch size probed.
COSTS = {1: {"regular": 100.0, "verify": 100.0, "draft": 10.0}, 2: {"regular": 250.0, "verify": 290.0, "draft": 30.0},
         4: {"regular": 300.0, "verify": 400.0, "draft": 50.0}, 16: {"regular": 400.0, "verify": 800.0, "draft": 100.0},
         32: {"regular": 600.0, "verify": 1500.0, "draft": 150.0}}


def _run_demo(monkeypatch, capsys, argv, script=scripted, groups=GROUPS, clock=None):
    """Runs ``python -m minibass demo ARGV`` in this process with scripted decoding; returns (exit status, stdout
    with its whitespace runs made single spaces, the table's rows by method, what was recorded)."""
    target, draft = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)
    tokenizer = SimpleNamespace(eos_token_id=0, encode=lambda text, add_special_tokens=False: [1, 2],
                                decode=lambda tokens: " ".join(map(str, tokens)))
    monkeypatch.setattr(cli, "_load", lambda args: (target, draft, tokenizer))
    monkeypatch.setattr(zoo, "demo_batches", lambda tokenizer, batch, n: groups)
    monkeypatch.setattr(zoo, "demo_prompts", lambda n: ["def f():\n"] * n)
    clocks, record = {}, {"probes": [], "runs": []}

    @contextlib.contextmanager
    def forward_clock(model, device):
        clocks[model] = {"seconds": 0.0}
        yield clocks[model]

    def call_costs(target_, draft_, batch, verify_tokens):
        record["probes"].append((batch, verify_tokens))
        return dict(COSTS[batch])

    monkeypatch.setattr(common, "forward_clock", forward_clock)
    monkeypatch.setattr(common, "call_costs", call_costs)

    def decode(name, prompts, sampling):
        if sampling is None:  # a warm-up
            return GenerationResult([[1, 1] for _ in prompts], _stats(steps=2, wall=1.0))
        if not sampling.greedy:  # the sampled completion at the end
            return GenerationResult([[5, 6, 0]], _stats(steps=2, wall=1.0))
        group = groups.index(prompts)
        rnd = record["runs"].count((name, group))
        record["runs"].append((name, group))
        if clock is not None:
            clock["now"] += 1.0  # every timed run takes one second of the scripted clock
        stats, clocks[target]["seconds"], clocks[draft]["seconds"] = script(name, rnd, group)
        return GenerationResult(_tokens(group)[:len(prompts)], stats)

    monkeypatch.setattr(minibass, "generate", lambda model, prompts, n, sampling=None, **kw:
                        decode("regular", prompts, sampling))
    monkeypatch.setattr(minibass, "speculative_generate", lambda t, d, prompts, n, sampling=None, draft_length=None,
                        **kw: decode(str(draft_length), prompts, sampling))
    if clock is not None:
        monkeypatch.setattr(cli, "time", SimpleNamespace(monotonic=lambda: clock["now"]))
    args = cli.build_parser().parse_args(["demo", "--attention", "naive", "--max-new-tokens", str(NEW), *argv])
    code = cli.demo(args)
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == "regular generate" or cells[0].startswith("speculative, k = "):
            rows[cells[0].removeprefix("speculative, k = ")] = cells[1:]
    return code, " ".join(out.split()), rows, record


DEMO = ["--batch-size", "2", "--prompts", "4", "--repeats", "3", "--draft-lengths", "1", "2", "3", "dynamic"]


def test_the_demo_table_shows_median_tokens_per_s_median_ratios_and_the_median_ratio_rounds_counts(monkeypatch,
                                                                                                   capsys):
    """tokens/s: the median over rounds of each method's runs; speed-up: the median of its per-round ratios to the
    regular run of the same round; acceptance, accepted/step, target calls and draft lengths: those of the round
    with the median ratio (for regular decoding, its median round by tokens/s), its two batches summed."""
    code, out, rows, record = _run_demo(monkeypatch, capsys, DEMO)
    assert code == 0 and "greedy check: speculative output == regular output for all 4 prompts" in out
    columns = ["tokens/s", "speed-up", "acceptance", "accepted/step", "target calls", "draft lengths"]
    assert {name: dict(zip(columns, cells)) for name, cells in rows.items()} == {
        "regular generate": dict(zip(columns, ["16.0", "1.00x", "-", "-", "16", "-"])),
        "1": dict(zip(columns, ["20.0", "1.60x", "0.36", "0.36", "13", "1..1 (mean 1.0)"])),
        "2": dict(zip(columns, ["64.0", "3.20x", "0.60", "1.20", "7", "2..2 (mean 2.0)"])),
        "3": dict(zip(columns, ["50.0", "2.50x", "0.50", "1.50", "7", "3..3 (mean 3.0)"])),
        "dynamic": dict(zip(columns, ["64.0", "5.00x", "0.43", "1.30", "7", "1..5 (mean 3.0)"])),
    }
    assert len(record["runs"]) == 3 * 2 * 5  # three rounds of two batches of five methods


def test_the_demo_probes_and_reads_the_fixed_length_with_the_highest_speed_up_in_its_median_round(monkeypatch, capsys):
    """k = 2, the fixed length with the highest speed-up (dynamic is faster, but is not a fixed length): the probes
    time a verify of 3 tokens at batch sizes 1, 4, 16, 32 and the demo's own 2; the "measured now" line is batch
    2's, in regular steps; the reading splits k = 2's median round (round 2) into regular steps of round 2's regular
    run."""
    code, out, _, record = _run_demo(monkeypatch, capsys, DEMO)
    assert code == 0
    assert record["probes"] == [(1, 3), (2, 3), (4, 3), (16, 3), (32, 3)]
    assert ("measured now at batch 2: one regular step 250.00 ms; one draft call 30.00 ms = 0.12 regular steps; "
            "one verify of 3 tokens 290.00 ms = 1.16 regular steps") in out
    assert "Caution" not in out  # round 2's regular step, 250 ms, is the probe's
    assert ("Reading: with k = 2 (the fixed length with the highest speed-up), a step cost on average (in the round "
            "with the median speed-up, prefill included, "
            "in regular steps of 250.00 ms, the regular run of that round) one verify 0.60 + 2.0 draft calls 0.32 + "
            "the loop's own work outside the forward calls (sampling, the rejection step, roll-back, bookkeeping) "
            "0.08 = 1.00.") in out
    assert ("Each sequence emitted 2.20 tokens per step on average (per-token acceptance 0.70: as if each draft token "
            "were accepted on its own with that chance; the table's acceptance also counts the drafts after a "
            "rejection), but a batch steps until its slowest sequence is done: 3.20 tokens per step for that one "
            "(8 tokens in 2.5 steps, the mean over 2 batches), so 3.20 / 1.00 = 3.20x, the speed-up in the table; "
            "without the host work it would be 3.20 / 0.92 = 3.48x.") in out
    assert ("Predicted per sequence from the forward calls alone, timed at each batch size (batch 1: 1.83x, batch 2: "
            "1.57x, batch 4: 1.32x, batch 16: 0.88x, batch 32: 0.73x): speculative decoding stops paying on this "
            "device from batch 16 on: there a verify of 3 tokens per sequence costs 2.00 regular steps and a draft "
            "call 0.25.") in out
    assert "may have been busy" not in out  # the predictions fall with the batch


def test_without_a_fixed_length_the_demo_probes_a_verify_of_five_tokens_and_gives_no_reading(monkeypatch, capsys):
    code, out, rows, record = _run_demo(monkeypatch, capsys, ["--batch-size", "2", "--prompts", "4", "--repeats", "3",
                                                              "--draft-lengths", "dynamic"])
    assert code == 0 and set(rows) == {"regular generate", "dynamic"}
    assert {verify for _, verify in record["probes"]} == {5}  # k = 4 where no fixed length is given
    assert "one verify of 5 tokens" in out
    assert "(give a fixed draft length in --draft-lengths for a reading of the table)" in out


def _constant(name, rnd, group):
    """Every round alike: one batch, regular 2 s, k = 2 1 s."""
    if name == "regular":
        return _stats(steps=NEW, wall=2.0, speculative=False), 1.8, 0.0
    return _stats(steps=4, wall=1.0, lengths=[2] * 4, accepted=4), 0.5, 0.25


@pytest.mark.parametrize("started, rounds", [(64.0, 5), (63.5, 3)])
def test_the_demo_cuts_to_three_rounds_exactly_when_five_would_end_past_demo_seconds(monkeypatch, capsys, started,
                                                                                     rounds):
    """The scripted clock starts at 100 s and every timed run takes 1 s: three rounds of two runs end at 106 s, a
    round takes 2 s, and two more rounds and what follows them (about two rounds) take 8 s more. From a start at
    64 s that ends at exactly 50 s (DEMO_SECONDS): five rounds; from 63.5 s, 0.5 s later: three."""
    monkeypatch.setattr(cli, "_STARTED", started)
    code, out, rows, record = _run_demo(monkeypatch, capsys, ["--batch-size", "2", "--prompts", "2",
                                                              "--draft-lengths", "2"],
                                        script=_constant, groups=GROUPS[:1], clock={"now": 100.0})
    assert code == 0 and set(rows) == {"regular generate", "2"}
    assert record["runs"].count(("regular", 0)) == rounds and record["runs"].count(("2", 0)) == rounds
    cut = ("(a round took 2.0 s, so 5 rounds would take the demo past a minute: 3 rounds; --repeats 5 asks for 5 "
           "whatever they take)")
    assert (cut in out) == (rounds == 3)


def test_an_explicit_repeats_5_runs_five_rounds_however_slow(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_STARTED", 0.0)  # 106 s in: far past DEMO_SECONDS
    code, out, _, record = _run_demo(monkeypatch, capsys, ["--batch-size", "2", "--prompts", "2", "--draft-lengths",
                                                           "2", "--repeats", "5"],
                                     script=_constant, groups=GROUPS[:1], clock={"now": 100.0})
    assert code == 0 and record["runs"].count(("regular", 0)) == 5 and "a round took" not in out


def test_all_rounds_fit_counts_the_two_rounds_after_them_and_allows_an_exact_fit():
    # 42 s in, rounds of 2 s: two more rounds and about two rounds' worth after them end at exactly 50 s.
    assert cli._all_rounds_fit(42.0, 2.0)
    assert not cli._all_rounds_fit(42.5, 2.0)
    assert cli._all_rounds_fit(34.0, 4.0) and not cli._all_rounds_fit(34.0, 4.25)


# --- the helpers -----------------------------------------------------------------------------------------------------

def test_merged_sums_every_count_and_time_keeps_the_tokens_in_order_and_joins_the_draft_lengths():
    first = GenerationResult([[1, 2], [3]], GenerationStats(
        steps=2, target_calls=3, draft_calls=4, draft_lengths=[2, 2], proposed_tokens=8, accepted_tokens=5,
        sequence_steps=4, new_tokens=3, wall_time=0.5, time_split={"draft": 0.1, "verify": 0.2}, speculative=True))
    second = GenerationResult([[4], [5, 6, 7]], GenerationStats(
        steps=3, target_calls=5, draft_calls=7, draft_lengths=[1, 3, 3], proposed_tokens=11, accepted_tokens=6,
        sequence_steps=6, new_tokens=4, wall_time=0.25, time_split={"verify": 0.5, "accept": 0.125},
        speculative=True))
    merged = cli._merged([first, second])
    assert merged.tokens == [[1, 2], [3], [4], [5, 6, 7]]
    s = merged.stats
    assert (s.steps, s.target_calls, s.draft_calls, s.proposed_tokens, s.accepted_tokens, s.sequence_steps,
            s.new_tokens, s.wall_time) == (5, 8, 11, 19, 11, 10, 7, 0.75)
    assert s.draft_lengths == [2, 2, 1, 3, 3] and s.speculative
    assert s.time_split == {"draft": 0.1, "verify": 0.7, "accept": 0.125}
    assert first.stats.draft_lengths == [2, 2]  # the parts are left alone


def test_the_schedule_rotates_the_policies_by_one_per_batch_and_per_round():
    """Round r's batch b starts with the policy round r's batch b + 1 (and round r + 1's batch b) starts with,
    whatever the number of batches."""
    order = cli._schedule(2, 2, ["a", "b", "c"])
    blocks = [order[i:i + 4] for i in range(0, len(order), 4)]
    assert [[p for _, _, p in block] for block in blocks] == [
        [None, "a", "b", "c"], [None, "b", "c", "a"],  # round 0: batches 0 and 1
        [None, "b", "c", "a"], [None, "c", "a", "b"],  # round 1
    ]
    assert [(r, b) for r, b, _ in order[::4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def _row(regular_ms=10.0, speedup=2.0, **changes):
    """k = 2, 10 steps: a verify 0.8, two draft calls 0.3, host work 0.1 regular steps each; mean accepted 1.2
    (alpha ~0.70); the regular run took 25 steps, so 2.5 tokens a step: 2.5 / 1.2 = 2.08x."""
    row = {"policy": "2", "paired_regular_ms": regular_ms, "steps": 10, "target_ms": 8 * regular_ms,
           "draft_ms": 3 * regular_ms, "host_ms": 1 * regular_ms, "paired_regular_steps": 25, "mean_accepted": 1.2,
           "draft_calls": 20, "speedup": speedup, "batches": 1}
    return {**row, **changes}


PAYS = {1: {"regular": 10.0, "verify": 11.0, "draft": 1.0}, 4: {"regular": 10.0, "verify": 13.0, "draft": 1.0}}


def test_the_reading_of_one_sequence_says_its_own_pace_and_that_it_pays_everywhere():
    text = cli._reading([_row(speedup=2.5)], PAYS, 1, 2)
    assert text.startswith("Reading: with k = 2 (the fixed length with the highest speed-up), a step cost on average "
                           "(in the round with the median speed-up, prefill included, in regular steps of 10.00 ms, the "
                           "regular run of that round) one verify 0.80 + 2.0 draft calls 0.30 + the loop's own work")
    assert ("bookkeeping) 0.10 = 1.20. Each sequence emitted 2.50 tokens per step (25 tokens in 10 steps; per-token "
            "acceptance 0.70: as if each draft token were accepted on its own with that chance; the table's "
            "acceptance also counts the drafts after a rejection),") in text
    assert "slowest sequence" not in text
    assert "so 2.50 / 1.20 = 2.08x, " in text
    assert ("without the host work it would be 2.50 / 1.10 = 2.27x. Predicted per sequence from the forward calls "
            "alone, timed at each batch size (batch 1: 1.69x, batch 4: 1.47x): per sequence it would pay at every "
            "batch size measured here.") in text


def test_the_reading_of_a_batch_says_it_gains_less_and_names_the_tables_own_speed_up_when_it_differs():
    text = cli._reading([_row(speedup=2.5)], {**PAYS, 2: PAYS[1]}, 2, 2)
    assert ("Each sequence emitted 2.20 tokens per step on average (per-token acceptance 0.70: as if each draft token "
            "were accepted on its own with that chance; the table's acceptance also counts the drafts after a "
            "rejection), but a batch steps until its slowest sequence is done: 2.50 tokens per step for that one "
            "(25 tokens in 10 steps),") in text
    # 2.50 / 1.20 = 2.08x is not the 2.50x of the table (an even --repeats: the mean of the two middle rounds).
    assert "so 2.50 / 1.20 = 2.08x, that round's speed-up (the table shows 2.50x, the mean of the two middle " in text
    assert "per sequence it would pay at every batch size measured here; a batch gains less, as it waits for" in text
    same = cli._reading([_row(speedup=2.5 / 1.2)], {**PAYS, 2: PAYS[1]}, 2, 2)
    assert "2.08x, the speed-up in the table;" in same


def test_the_reading_warns_of_a_round_two_and_a_half_times_slower_than_the_probe_but_not_of_one_twice_as_slow():
    probe = {8: {"regular": 10.0, "verify": 11.0, "draft": 1.0}}
    assert cli._reading([_row(25.0)], probe, 8, 2).startswith(
        "Caution: in the round read below, a regular step took 25.00 ms, 2.5 times the 10.00 ms of the probe above")
    assert cli._reading([_row(20.0)], probe, 8, 2).startswith("Reading:")
    assert cli._reading([_row(5.0)], probe, 8, 2).startswith("Reading:")
    # A run of a few new tokens a batch: its regular step is mostly its share of the prefill, not a stall.
    assert cli._reading([_row(25.0, paired_regular_steps=7, steps=3)], probe, 8, 2).startswith("Reading:")
    assert cli._reading([_row(25.0, paired_regular_steps=14, steps=6, batches=2)], probe, 8, 2).startswith("Reading:")
    assert cli._reading([_row(25.0, paired_regular_steps=16, steps=6)], probe, 8, 2).startswith("Caution:")


def test_the_reading_notes_a_prediction_that_rises_by_a_fifth_with_the_batch():
    # No draft cost: each prediction is the expected tokens per step x regular / verify, so batch 4's is 1.2 times
    # batch 1's (a 20 % rise, past the 15 % a CPU's own noise allows).
    rising = {1: {"regular": 10.0, "verify": 10.0, "draft": 0.0}, 4: {"regular": 12.0, "verify": 10.0, "draft": 0.0}}
    text = cli._reading([_row()], rising, 1, 2)
    assert "(batch 1: 2.20x, batch 4: 2.64x)" in text
    assert "(Batch 4's prediction is 20.0 % above batch 1's. Each comes from a few short probes: where one" in text
    assert "where one rises with the batch by more than 15 %, the machine may have been busy" in text


def test_the_reading_names_every_prediction_that_rises_over_the_one_before_it():
    """Predictions of 2.20, 2.09, 2.51 and 1.98x (regular 10, 10.5, 11.4, 9 ms against a verify of 10 ms): batch 16's
    is 20 % above batch 4's, the one before it, not batch 1's, the first. Then 1.98, 2.38 and 2.61x at batch 1, 4 and
    16 rise twice, by 20 and 10 %: only the first is named; and with 2.97x at batch 16 (25 %), both are."""
    once = {1: {"regular": 10.0, "verify": 10.0, "draft": 0.0}, 4: {"regular": 9.5, "verify": 10.0, "draft": 0.0},
            16: {"regular": 11.4, "verify": 10.0, "draft": 0.0}, 32: {"regular": 9.0, "verify": 10.0, "draft": 0.0}}
    text = cli._reading([_row()], once, 1, 2)
    assert "(batch 1: 2.20x, batch 4: 2.09x, batch 16: 2.51x, batch 32: 1.98x)" in text
    assert "(Batch 16's prediction is 20.0 % above batch 4's. Each comes" in text
    twice = {1: {"regular": 9.0, "verify": 10.0, "draft": 0.0}, 4: {"regular": 10.8, "verify": 10.0, "draft": 0.0},
             16: {"regular": 11.88, "verify": 10.0, "draft": 0.0}}
    text = cli._reading([_row()], twice, 1, 2)
    assert "(Batch 4's prediction is 20.0 % above batch 1's; batch 16's prediction is 10.0 % above" not in text
    assert "(Batch 4's prediction is 20.0 % above batch 1's. Each comes" in text  # 16 over 4: 10 %, not named
    two = {**twice, 16: {"regular": 13.5, "verify": 10.0, "draft": 0.0}}
    text = cli._reading([_row()], two, 1, 2)
    assert "(Batch 4's prediction is 20.0 % above batch 1's; batch 16's prediction is 25.0 % above batch 4's." in text


def test_the_reading_counts_the_slowest_sequences_tokens_and_steps_per_batch():
    """Two batches of sequences of 48 tokens: 96 regular steps, 40 speculative ones, so each batch's slowest
    sequence emitted 48 tokens in 20 steps on average; at batch 1 the same with the prompts one at a time."""
    row = _row(paired_regular_steps=96, steps=40, batches=2)
    assert "2.40 tokens per step for that one (48 tokens in 20.0 steps, the mean over 2 batches)," in cli._reading(
        [row], {**PAYS, 2: PAYS[1]}, 2, 2)
    assert "Each sequence emitted 2.40 tokens per step (48 tokens in 20.0 steps, the mean over 2 batches; " in \
        cli._reading([row], PAYS, 1, 2)


def test_where_it_stops_paying_the_reading_gives_that_batchs_verify_and_draft_in_regular_steps():
    costs = {1: {"regular": 10.0, "verify": 12.0, "draft": 1.0}, 8: {"regular": 10.0, "verify": 25.0, "draft": 2.5},
             32: {"regular": 10.0, "verify": 40.0, "draft": 4.0}}
    text = cli._reading([_row()], costs, 1, 2)
    assert ("(batch 1: 1.57x, batch 8: 0.73x, batch 32: 0.46x): speculative decoding stops paying on this device from "
            "batch 8 on: there a verify of 3 tokens per sequence costs 2.50 regular steps and a draft call 0.25.") in text
