"""Edges of the research scripts in scripts/ and of the docs site's hook: grow_draft.py, pair_shapes.py,
course_times.py, g_test_false_alarms.py, gpu_sync_check.py, verify_cost.py, host_work.py, grad_mode.py,
oracle_gallery.py, oracle_vllm.py, oracle_sglang.py and docs/hooks.py (grow_draft.py and verify_cost.py also have
tests in test_zoo.py and test_costmodel.py). Nothing here times anything or needs a GPU, vLLM or SGLang: timed calls,
subprocesses, CUDA's sync-debug switch and the engines are stand-ins that record what the scripts ask of them, and
the numbers a script prints are checked against what those stand-ins returned."""

from __future__ import annotations

import contextlib
import re
import runpy
import sys
import types
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import minibass
from minibass import costmodel as cm
from minibass import oracle
from minibass.draft_length import expected_tokens
from minibass.oracle import known_bugs
from minibass.oracle.verdict import Verdict
from minibass.sampling import SamplingParams

from conftest import ROOT, SCRIPTS, hf_tiny, script


def run_as_main(path: Path, argv: list[str], monkeypatch) -> object:
    """Runs a script as ``python PATH ARGV`` would, in this process; returns its exit code (None if it returned)."""
    monkeypatch.setattr(sys, "argv", [str(path), *argv])
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_status:
        return exit_status.code
    return None


@pytest.mark.parametrize("name,argv,says", [
    ("pair_shapes", ["--drafts", "2x0"], "a shape is LAYERSxHIDDEN"),
    ("pair_shapes", ["--k", "0"], "--k must be >= 1, got 0"),
    ("verify_cost", ["--reps", "0"], "--reps and --threads must be >= 1"),
    ("auto_constants", ["--json", "bench_results/decode-cpu.json"], "is not the JSON of `python -m minibass.bench "
                                                                    "policies`"),
    ("auto_constants", ["--pulls", "-1"], "pull must be >= 0"),
    ("oracle_gallery", ["--rows", "0"], "--rows must be >= 100"),
    ("grow_draft", ["--draft", "no/such/folder", "--out", "x"], "is not a checkpoint folder (no config.json)"),
    ("pair_acceptance", ["--draft", "x", "--batch", "0", "--out", "x.json"], "--batch must be >= 1, got 0"),
    ("host_work", ["--batch", "0"], "--batch, --draft-length, --rounds and --threads must be >= 1"),
    ("grad_mode", ["--rounds", "0"], "--batch, --draft-length and --rounds must be >= 1"),
])
def test_a_script_refuses_bad_options_in_one_line_before_its_work(name, argv, says, monkeypatch, capsys):
    """As the package's commands do: ``error: ...`` on stderr, exit status 2, no traceback, nothing printed first."""
    monkeypatch.chdir(ROOT)
    assert run_as_main(SCRIPTS / f"{name}.py", argv, monkeypatch) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and says in err and "Traceback" not in err and not out.strip(), (out, err)


# --- grow_draft.py -----------------------------------------------------------------------------------------------

def test_grow_draft_copies_the_tokenizer_but_not_the_card_and_writes_float32(tmp_path, capsys):
    """The deeper draft is written in float32 whatever the draft is stored in, with the draft's tokenizer files
    beside it and not its model card (which describes the draft); the message counts the draft's own layers."""
    hf_tiny("llama", seed=1).to(torch.bfloat16).save_pretrained(tmp_path / "draft")
    files = {"tokenizer.json": "{}", "tokenizer_config.json": "{}", "special_tokens_map.json": "{}",
             "README.md": "the draft's card"}
    for name, text in files.items():
        (tmp_path / "draft" / name).write_text(text)
    script("grow_draft")["main"](["--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "grown")])
    written = {p.name for p in (tmp_path / "grown").iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= written
    assert "README.md" not in written
    from safetensors.torch import load_file

    weights = load_file(tmp_path / "grown" / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.float32}
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'grown'}: 2 + 1 layers, the new one adding nothing yet"


def test_grow_leaves_the_given_model_alone_and_numbers_the_new_layer_for_the_cache():
    """``grow`` returns a copy: the model given keeps its layers and config. The new layer starts as a copy of the
    last one but for its two output projections, zero. It has the next layer index, so that transformers' KV cache
    keeps it apart: once the layer is trained (its output projection no longer zero), a cached decode step gives
    the logits of a full forward pass."""
    model = hf_tiny("llama", seed=2, num_hidden_layers=2)
    grown = script("grow_draft")["grow"](model)
    assert len(model.model.layers) == 2 and model.config.num_hidden_layers == 2
    assert len(grown.model.layers) == 3 and grown.config.num_hidden_layers == 3
    last = dict(model.model.layers[-1].named_parameters())
    for name, parameter in grown.model.layers[-1].named_parameters():
        zeroed = name.startswith(("self_attn.o_proj.", "mlp.down_proj."))
        assert torch.equal(parameter, torch.zeros_like(parameter) if zeroed else last[name]), name
    assert [layer.self_attn.layer_idx for layer in grown.model.layers] == [0, 1, 2]
    with torch.no_grad():
        grown.model.layers[-1].self_attn.o_proj.weight.normal_(0, 0.2)
        ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2]])
        full = grown(ids).logits[0, -1]
        prefix = grown(ids[:, :-1], use_cache=True)
        key = "cache" if "cache" in prefix else "past_key_values"  # (transformers' name from 5.x on, and before)
        step = grown(ids[:, -1:], **{key: prefix[key]}, use_cache=True).logits[0, -1]
    torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-4)


# --- pair_shapes.py ----------------------------------------------------------------------------------------------

LINE = re.compile(r"target (\S+) \(([\d.]+) M\): decode ([\d.]+), verify ([\d.]+) \(([\d.]+)x\) \| draft (\S+) "
                  r"\(([\d.]+) M\): ([\d.]+) = ([\d.]+) of a decode step \| predicted speed-up ([\d.]+)x")


def test_pair_shapes_builds_each_shape_once_and_prices_a_step_as_verify_plus_k_drafts(capsys):
    """Stand-in timings: each model's call costs its layers x 10 ms plus its hidden size / 100, times 1 + (new - 1)
    / 4. The script builds each LAYERSxHIDDEN shape once (heads of 32, at least 2; half as many KV heads, at least
    1), times target decode (1 token) and verify (k + 1 tokens) and the draft (1 token) at the batch and context
    asked, and prints verify / decode, draft / decode and E[tokens | alpha, k] x decode / (verify + k x draft)."""
    ns = script("pair_shapes")
    built, calls = {}, []

    def call_ms(model, batch, context, new):
        c = model.config
        spec = f"{c.num_hidden_layers}x{c.hidden_size}"
        built.setdefault(spec, (c.num_attention_heads, c.num_key_value_heads,
                                sum(p.numel() for p in model.parameters())))
        calls.append((spec, batch, context, new))
        return (10 * c.num_hidden_layers + c.hidden_size / 100) * (1 + (new - 1) / 4)

    ns["main"].__globals__["call_ms"] = call_ms
    builds, random_llama = [], ns["main"].__globals__["random_llama"]
    ns["main"].__globals__["random_llama"] = lambda folder, **kw: builds.append(Path(folder).name) or random_llama(
        folder, **kw)
    ns["main"](["--batch", "3", "--context", "5", "--k", "2", "--alpha", "0.5", "--targets", "2x64", "1x96",
                "--drafts", "1x64", "1x96"])
    assert Counter(builds) == {"2x64": 1, "1x96": 1, "1x64": 1}  # 1x96, both a target and a draft, built once
    out = capsys.readouterr().out.splitlines()
    assert built["2x64"][:2] == (2, 1) and built["1x96"][:2] == (3, 1) and built["1x64"][:2] == (2, 1)
    assert {c[1:3] for c in calls} == {(3, 5)}
    assert sorted(c for c in calls if c[0] == "2x64") == [("2x64", 3, 5, 1), ("2x64", 3, 5, 3)]
    assert out[0] == "batch 3, context 5, k = 2, alpha = 0.5 (1.75 expected tokens per step); times are medians in ms"
    rows = [LINE.fullmatch(line).groups() for line in out[1:]]
    assert [(r[0], r[5]) for r in rows] == [("2x64", "1x64"), ("2x64", "1x96"), ("1x96", "1x64"), ("1x96", "1x96")]

    def ms(spec, new):
        layers, hidden = map(int, spec.split("x"))
        return (10 * layers + hidden / 100) * (1 + (new - 1) / 4)

    for t, t_params, decode, verify, ratio, d, d_params, draft, share, speedup in rows:
        assert float(t_params) == pytest.approx(built[t][2] / 1e6, abs=0.051)
        assert float(d_params) == pytest.approx(built[d][2] / 1e6, abs=0.0051)
        assert float(decode) == pytest.approx(ms(t, 1), abs=0.005)
        assert float(verify) == pytest.approx(ms(t, 3), abs=0.005)
        assert float(ratio) == pytest.approx(ms(t, 3) / ms(t, 1), abs=0.005)
        assert float(draft) == pytest.approx(ms(d, 1), abs=0.005)
        assert float(share) == pytest.approx(ms(d, 1) / ms(t, 1), abs=0.0005)
        step = ms(t, 3) + 2 * ms(d, 1)
        assert float(speedup) == pytest.approx(expected_tokens(0.5, 2) * ms(t, 1) / step, abs=0.005)


def test_pair_shapes_takes_a_draft_the_target_always_accepts(capsys):
    """At alpha = 1 (a draft that is always accepted) a step emits k + 1 tokens; the prediction is printed."""
    ns = script("pair_shapes")
    ns["main"].__globals__["call_ms"] = lambda model, batch, context, new: float(new)
    ns["main"](["--k", "3", "--alpha", "1", "--targets", "1x64", "--drafts", "1x64"])
    assert "(4.00 expected tokens per step)" in capsys.readouterr().out


@pytest.mark.parametrize("alpha", ["1.5", "-0.1", "nan"])
def test_pair_shapes_refuses_an_acceptance_that_is_not_a_probability_before_building_anything(alpha, capsys):
    with pytest.raises(SystemExit) as exit_status:
        script("pair_shapes")["main"](["--alpha", alpha, "--targets", "1x64", "--drafts", "1x64"])
    assert exit_status.value.code == 2 and "expected a probability in [0, 1]" in capsys.readouterr().err


# --- course_times.py ---------------------------------------------------------------------------------------------

def test_course_times_describes_every_chapter_as_the_committed_table_does():
    """The question, the first file and the exercise's check name of each chapter are the first columns of the
    table in tutorial/README.md (what ``--write`` keeps there)."""
    from minibass.course.build import CHAPTERS, chapters

    describe = script("course_times")["describe"]
    table = {}
    for line in (CHAPTERS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells and re.fullmatch(r"\d\d", cells[0]):
            table[cells[0]] = (cells[1], cells[2].strip("`"), cells[3])
    assert len(table) == len(chapters())
    for path in chapters():
        assert describe(path) == table[path.stem[:2]], path.name


def _chapter(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"# # {name[:2]} · Question {name[:2]}?\n#\n# Files: `a/{name}` (x), `b.py`\n{body}")
    return path


def test_course_times_runs_each_chapter_in_its_folder_in_both_modes_and_stops_on_a_failing_one(tmp_path):
    """A chapter runs as a script from its own folder, with the Agg backend, once with MINIBASS_COURSE_FAST=0
    (the learner's mode) and once with 1; a chapter that fails stops the script instead of being timed."""
    seconds = script("course_times")["seconds"]
    path = _chapter(tmp_path, "01_x.py", "import os, pathlib\npathlib.Path('seen').write_text("
                    "os.environ['MINIBASS_COURSE_FAST'] + ' ' + os.environ['MPLBACKEND'])\n")
    for fast, seen in ((False, "0 Agg"), (True, "1 Agg")):
        assert seconds(path, fast=fast) >= 0
        assert (tmp_path / "seen").read_text() == seen
    import subprocess

    with pytest.raises(subprocess.CalledProcessError):
        seconds(_chapter(tmp_path, "02_y.py", "raise SystemExit(3)\n"), fast=True)


def test_course_times_writes_the_table_only_when_asked_and_only_in_place_of_the_old_one(tmp_path, capsys):
    """Stand-in timings (learner 12.4 s, test mode 3.0 s). Without ``--write`` the README is left as it is; with it
    the old table is replaced by the new one, the text around it kept; a README with no table yet gets it at its
    TIMES_TABLE line."""
    ns = script("course_times")
    g = ns["main"].__globals__
    one = _chapter(tmp_path, "01_x.py", "from minibass.course.checks import check_roofline\n")
    two = _chapter(tmp_path, "02_y.py", "print('no exercise')\n")
    g["chapters"] = lambda: [one, two]
    g["CHAPTERS"] = tmp_path
    asked = []
    g["seconds"] = lambda path, fast: asked.append((path.name, fast)) or (3.0 if fast else 12.4)
    old = ("# Course\n\nintro\n\n| # | question | file it explains | exercise (checked by a cell) | time, learner / "
           "test mode |\n|---|---|---|---|---|\n| 01 | old | `old.py` | old | 1 s / 1 s |\n\nTimes: after.\n")
    readme = tmp_path / "README.md"
    readme.write_text(old)
    assert ns["main"]([]) == 0
    assert readme.read_text() == old
    assert sorted(asked) == [("01_x.py", False), ("01_x.py", True), ("02_y.py", False), ("02_y.py", True)]
    rows = ["| 01 | Question 01? | `a/01_x.py` | roofline step time and critical batch | 12 s / 3 s |",
            "| 02 | Question 02? | `a/02_y.py` | — | 12 s / 3 s |"]
    assert capsys.readouterr().out.splitlines() == rows
    assert ns["main"](["--write"]) == 0
    header = old.split("| 01 | old")[0]
    assert readme.read_text() == header + "\n".join(rows) + "\n\nTimes: after.\n"
    readme.write_text("# Course\n\nTIMES_TABLE\nafter\n")
    ns["main"](["--write"])
    assert readme.read_text() == ("# Course\n\n" + header.split("intro\n\n")[1] + "\n".join(rows) + "\nafter\n")


# --- g_test_false_alarms.py --------------------------------------------------------------------------------------

def _williams(law: np.ndarray, rows: int) -> tuple[float, int]:
    """Williams' factor and the degrees of freedom of the G-test for ``rows`` draws of ``law``, its cells pooled
    as docs/oracle.md says: cells expecting under 5 pooled into one, which, if itself under 5, joins the smallest."""
    expected = law * rows
    cells = list(expected[expected >= 5])
    small = expected[expected < 5].sum()
    if 0 < small < 5 and len(cells) > 1:
        cells[int(np.argmin(cells))] += small
    elif small > 0:
        cells.append(small)
    dof = len(cells) - 1
    return 1 + (rows * sum(1 / c for c in cells) - 1) / (6 * rows * dof), dof


@pytest.mark.parametrize("rows", [150, 2000, 1_000_000])  # at 10^6 the pooled cell is small and merges
def test_g_test_false_alarms_counts_the_runs_whose_g_test_statistic_exceeds_each_threshold(monkeypatch, capsys,
                                                                                           rows):
    """The script's G of each run is ``stats.g_test``'s (on the same draws) times Williams' factor: with stand-in
    critical values at the 30th, 60th and 90th percentile of ``g_test``'s statistics, the shares it prints are the
    shares of those runs above each, corrected and uncorrected; and it asks for the critical values at g_test's
    degrees of freedom."""
    from minibass.oracle.sampler import exact_events, setups
    from minibass.oracle.stats import g_test

    runs, seed = 300, 7
    exact = exact_events(*setups()["top_k"])
    law = np.array(list(exact.values()))
    law /= law.sum()
    draws = np.random.default_rng(seed).multinomial(rows, law, size=runs)
    tests = [g_test(Counter({e: int(c) for e, c in zip(exact, row) if c}), exact) for row in draws]
    corrected = np.array([t.statistic for t in tests])
    williams, dof = _williams(law, rows)
    assert {t.dof for t in tests} == {dof}
    values = np.unique(corrected)  # thresholds halfway between two distinct statistics: no run sits on one
    cut = {level: (values[i] + values[i - 1]) / 2
           for level, i in ((lvl, int(np.searchsorted(values, np.quantile(corrected, q)))) for lvl, q in
                            ((1e-3, 0.3), (1e-4, 0.6), (1e-5, 0.9)))}
    asked = []

    def isf(level, dof):
        asked.append((level, dof))
        return cut[level]

    ns = script("g_test_false_alarms")
    ns["main"].__globals__["stats"] = SimpleNamespace(chi2=SimpleNamespace(isf=isf))
    ns["main"](["--rows", str(rows), "--runs", str(runs), "--seed", str(seed)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{runs:,} runs of {rows:,} rows, {dof} degrees of freedom, Williams' factor {williams:.4f}"
    assert asked == [(1e-3, dof), (1e-4, dof), (1e-5, dof)]
    for line, level in zip(out[1:], cut):
        assert line == (f"level {level:.0e}: failed {np.mean(corrected * williams > cut[level]):.2e} uncorrected, "
                        f"{np.mean(corrected > cut[level]):.2e} corrected")


def test_g_test_false_alarms_pools_as_g_test_does_when_no_cell_is_small(capsys):
    """At 5 million rows every cell of the top-k setup expects more than 5: there is nothing to pool, and g_test has
    one degree of freedom fewer than cells (92) and a finite Williams' factor."""
    from minibass.oracle.sampler import exact_events, setups
    from minibass.oracle.stats import pooled_dof

    rows = 5_000_000
    exact = exact_events(*setups()["top_k"])
    law = np.array(list(exact.values())) / sum(exact.values())
    williams, dof = _williams(law, rows)
    assert dof == pooled_dof(exact, rows) == 92
    script("g_test_false_alarms")["main"](["--rows", str(rows), "--runs", "2"])
    assert capsys.readouterr().out.splitlines()[0] == (f"2 runs of 5,000,000 rows, 92 degrees of freedom, Williams' "
                                                       f"factor {williams:.4f}")


@pytest.mark.parametrize("argv,says", [(["--rows", "10"], "--rows 10: fewer than 2 cells after pooling"),
                                       (["--rows", "0"], "--rows 0: fewer than 2 cells after pooling"),
                                       (["--runs", "0"], "--runs must be at least 1")])
def test_g_test_false_alarms_refuses_a_sample_with_nothing_to_test(capsys, argv, says):
    """A sample that pools into one cell has no degrees of freedom (g_test passes it whatever it holds), and no run
    has no rate: usage errors, not an infinite Williams' factor or a crash."""
    with pytest.raises(SystemExit) as exit_status:
        script("g_test_false_alarms")["main"](argv)
    assert exit_status.value.code == 2 and says in capsys.readouterr().err


# --- gpu_sync_check.py -------------------------------------------------------------------------------------------

class _SyncSpy:
    """CUDA's sync-debug switch, the model and the checkpoint replaced: a forward call of a backend in ``failing``
    raises as a host synchronisation does while the switch is on "error"."""

    def __init__(self, failing=()):
        self.failing, self.mode = set(failing), "default"
        self.modes, self.calls, self.caches, self.loaded = [], [], [], []

    def set_sync_debug_mode(self, mode):
        self.modes.append(mode)
        self.mode = mode

    def init_cache(self, batch, capacity):
        self.caches.append((batch, capacity))
        return len(self.caches)

    def forward(self, tokens, q_lens, cache, attention=None):
        self.calls.append((attention, cache, tokens.tolist(), q_lens.tolist(), self.mode))
        if self.mode == "error" and attention in self.failing:
            raise RuntimeError("called a synchronizing CUDA operation")


def _gpu_sync_check(monkeypatch, spy) -> object:
    from minibass.bench import common

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", spy.set_sync_debug_mode)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(common, "random_llama", lambda folder, **shape: spy.loaded.append(shape) or Path(folder))
    monkeypatch.setattr(minibass, "load_model", lambda path, device=None: spy.loaded.append(device) or spy)
    return run_as_main(SCRIPTS / "gpu_sync_check.py", [], monkeypatch)


def test_gpu_sync_check_runs_a_decode_and_a_ragged_step_of_every_backend_with_syncs_as_errors(monkeypatch, capsys):
    """Each backend (and the default) gets a fresh cache of 3 sequences, a prefill of 5, 4 and 3 tokens with the
    switch off, then a decode step and a ragged step with an idle sequence with the switch on "error", turned off
    again after; all clean, the script exits 0."""
    spy = _SyncSpy()
    assert _gpu_sync_check(monkeypatch, spy) == 0
    assert spy.loaded == [dict(layers=2, hidden=128, heads=4, kv_heads=2), "cuda"]
    assert spy.caches == [(3, 64)] * 4
    assert spy.modes == ["error", "default"] * 4
    for i, backend in enumerate(["padded", "split", "ragged", None]):
        assert spy.calls[3 * i: 3 * i + 3] == [
            (backend, i + 1, list(range(5, 17)), [5, 4, 3], "default"),
            (backend, i + 1, [0, 1, 2], [1, 1, 1], "error"),
            (backend, i + 1, [0, 1, 2, 3, 4], [3, 0, 2], "error")]
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{name}: decode and ragged steps ran with no host synchronisation"
                   for name in ("padded", "split", "ragged", "default")]


def test_gpu_sync_check_takes_help_and_says_at_once_that_it_needs_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(minibass, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    assert run_as_main(SCRIPTS / "gpu_sync_check.py", ["--help"], monkeypatch) == 0
    assert "set_sync_debug_mode" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_as_main(SCRIPTS / "gpu_sync_check.py", [], monkeypatch) == \
        "error: this check needs a CUDA GPU, and torch sees none here"


def test_gpu_sync_check_names_every_backend_that_synchronised_and_goes_on_after_one(monkeypatch, capsys):
    """A backend that synchronises is reported with its traceback, the next backends still run (with the switch
    turned off in between), and the exit message names each one that failed."""
    spy = _SyncSpy(failing={"padded", "ragged"})
    assert _gpu_sync_check(monkeypatch, spy) == "host synchronisation in: padded, ragged"
    assert spy.modes == ["error", "default"] * 4
    assert [c[0] for c in spy.calls] == ["padded", "padded", "split", "split", "split", "ragged", "ragged",
                                         None, None, None]
    out = capsys.readouterr().out
    assert "padded: FAILED, a host synchronisation inside the step:" in out
    assert "ragged: FAILED, a host synchronisation inside the step:" in out
    assert "called a synchronizing CUDA operation" in out
    assert "padded: decode and ragged" not in out and "ragged: decode and ragged" not in out
    assert "split: decode and ragged steps ran with no host synchronisation" in out
    assert "default: decode and ragged steps ran with no host synchronisation" in out


# --- verify_cost.py ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--batch", "0"], ["--rounds", "0"], ["--tokens", "0", "1"], ["--tokens", "2"]])
def test_verify_cost_refuses_bad_counts_before_loading_anything(argv, tmp_path):
    with pytest.raises(ValueError, match="--tokens must be >= 1 and include 1; --batch and --rounds must be >= 1"):
        script("verify_cost")["main"](["--target", str(tmp_path / "absent"), *argv])


def test_verify_cost_prints_the_median_round_and_what_each_added_token_costs(save_hf, monkeypatch, capsys):
    """Stand-in roofs and timings (three rounds; each token count's median round is the one the table shows). Per
    token count: the time, the time over the 1-token call's, the roofline's ratio with fp32 weights, the
    intensity; past 1 token, the added ms per added token per sequence and the FLOP rate of the added work ('-'
    where the added tokens cost nothing). The options reach the timed calls and torch's thread count."""
    from transformers import AutoConfig

    folder = save_hf(hf_tiny())
    cpu = cm.Hardware("stand-in cpu", 1e11, 1e10)
    monkeypatch.setattr(cm, "measure_cpu", lambda: cpu)
    rounds = {1: [12.0, 50.0, 11.0], 2: [13.2, 13.0, 99.0], 3: [12.0, 12.0, 12.0], 4: [1.0, 12.003, 30.0]}
    median = {1: 12.0, 2: 13.2, 3: 12.0, 4: 12.003}
    calls, seen = [], iter(range(100))
    threads = torch.get_num_threads()

    def call_ms(model, batch, context, new, *, reps=15):
        calls.append((batch, context, new, reps, torch.get_num_threads()))
        return rounds[new][next(seen) // 4]

    ns = script("verify_cost")
    ns["main"].__globals__["call_ms"] = call_ms
    try:
        ns["main"](["--target", str(folder), "--batch", "3", "--context", "7", "--tokens", "1", "2", "3", "4",
                    "--rounds", "3", "--reps", "2", "--threads", str(threads + 1)])
    finally:
        torch.set_num_threads(threads)
    assert calls == [(3, 7, t, 2, threads + 1) for _ in range(3) for t in (1, 2, 3, 4)]
    out = capsys.readouterr().out.splitlines()
    shape = cm.ModelShape.from_config(AutoConfig.from_pretrained(folder), bytes_per_element=4)
    assert out[0].startswith(f"{folder}: {shape.params / 1e6:.1f} M parameters, fp32; batch 3, 7 cached tokens")
    assert out[0].endswith("stand-in cpu: peak 100 GFLOP/s, bandwidth 10.0 GB/s, ridge point 10.0 FLOPs/byte")
    rows = {int(line.split()[0]): line.split() for line in out[2:]}
    assert sorted(rows) == [1, 2, 3, 4]
    for t, row in rows.items():
        assert float(row[1]) == pytest.approx(median[t], abs=0.005)
        assert float(row[2]) == pytest.approx(median[t] / 12.0, abs=0.005)
        roof = cm.step_time(shape, cpu, 3, t, 7) / cm.step_time(shape, cpu, 3, 1, 7)
        assert float(row[3]) == pytest.approx(roof, abs=0.005)
        assert float(row[4]) == pytest.approx(shape.intensity(3, t, 7), abs=0.05)
        if t == 1:
            assert len(row) == 5
            continue
        extra_ms = (median[t] - 12.0) / (t - 1)
        assert float(row[5]) == pytest.approx(extra_ms, abs=0.005)
        if extra_ms > 0:
            rate = (shape.flops(3, t, 7) - shape.flops(3, 1, 7)) / (t - 1) / (extra_ms * 1e-3) / 1e9
            assert float(row[6]) == pytest.approx(rate, abs=0.5 + 1e-6 * rate)
        else:
            assert row[6] == "-"
    assert float(rows[4][6]) > 10  # the 4-token row's rate is large enough for the check above to bite


# --- oracle_gallery.py -------------------------------------------------------------------------------------------

def test_oracle_gallery_tabulates_each_bugs_verdict_at_the_rows_asked(capsys):
    """The table's rows against the bugs' own verdicts at the same rows: the checks failed, the rows with impossible
    events summed over the setups, and the failed G-test (joint, marginal or length) with the largest statistic
    over threshold."""
    script("oracle_gallery")["main"](["--rows", "1000"])
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["| bug | checks failed | rows with impossible events | strongest G-test failure | G | "
                       "threshold |", "|---|---|---|---|---|---|"]
    assert len(out) == 2 + len(known_bugs.SAMPLERS)
    for line, (name, fn) in zip(out[2:], known_bugs.SAMPLERS.items()):
        verdict = oracle.check_sampler(fn, rows=1000)
        failed = verdict.failures()
        impossible = sum(int(c.statistic) for c in verdict.checks if c.name.endswith("] impossible events"))
        g_tests = [c for c in failed if c.name.endswith(("G-test", "marginal", "(bonus token)", "emitted length"))]
        worst = max(g_tests, key=lambda c: c.statistic / c.threshold, default=None)
        cells = f"{worst.name} | {worst.statistic:.4g} | {worst.threshold:.4g}" if worst else "- | - | -"
        assert line == f"| `{name}` | {len(failed)} of {len(verdict.checks)} | {impossible:,} | {cells} |"


def test_oracle_gallery_picks_the_widest_margin_not_the_largest_g_and_shows_none_when_no_g_test_failed(monkeypatch,
                                                                                                        capsys):
    """Stand-in verdicts: the strongest failure is the largest G over its threshold (not the largest G), a passing
    G-test is never shown, and a bug that fails no G-test shows dashes; the rows asked reach check_sampler."""
    def verdict(name, checks):
        v = Verdict(name)
        for check in checks:
            v.add(*check)
        return v

    verdicts = {
        "a": verdict("a", [("never accepts x with p(x) = 0", "", 3, 0), ("[s1] impossible events", "", 1234, 0),
                           ("[s2] impossible events", "", 5, 0), ("[s1] joint G-test", "", 100, 50),
                           ("[s1] position 2 marginal", "", 90, 30), ("[s2] emitted length", "", 1000, 800),
                           ("[s2] joint G-test", "", 10, 50)]),
        "b": verdict("b", [("p == q accepts every draft", "", 7, 0), ("[s1] impossible events", "", 0, 0),
                           ("[s1] joint G-test", "", 49, 50)]),
    }
    asked = []

    def check_sampler(fn, *, rows, name):
        asked.append((rows, name))
        return verdicts[fn]

    monkeypatch.setattr(known_bugs, "SAMPLERS", {"bug_a": "a", "bug_b": "b"})
    monkeypatch.setattr(oracle, "check_sampler", check_sampler)
    script("oracle_gallery")["main"](["--rows", "321"])
    assert asked == [(321, "bug_a"), (321, "bug_b")]
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| `bug_a` | 6 of 7 | 1,239 | [s1] position 2 marginal | 90 | 30 |",
        "| `bug_b` | 1 of 3 | 0 | - | - | - |"]


# --- oracle_vllm.py and oracle_sglang.py -------------------------------------------------------------------------

def _fake_module(monkeypatch, name: str, **attributes) -> types.ModuleType:
    """A stand-in for an engine's module (and its parents) in sys.modules."""
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    parts = name.split(".")
    for i in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    monkeypatch.setitem(sys.modules, name, module)
    return module


def _vllm_rejection_sample(seen):
    """vLLM v1's ``rejection_sample`` as its docstring describes it, on the CPU: row b's drafts are entries
    cu[b-1]:cu[b] of the flattened inputs; target_probs are the k verified positions only; the bonus token comes
    in; the output is [B, max_spec_len + 1]: accepted drafts, the recovered or bonus token, -1 after. The rule is
    minibass's rejection sampling, with the bonus token's distribution one-hot."""
    from minibass.rejection import rejection_sample as reference

    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_probs, bonus_token_ids, sampling_metadata):
        batch = len(num_draft_tokens)
        total = sum(num_draft_tokens)
        seen.append((max_spec_len, cu_num_draft_tokens.dtype))
        if cu_num_draft_tokens.tolist() != np.cumsum(num_draft_tokens).tolist() \
                or set(num_draft_tokens) != {max_spec_len}:
            raise ValueError("cu_num_draft_tokens must be the running sum of num_draft_tokens")
        if draft_token_ids.shape != (total,) or draft_probs.shape[0] != total or target_probs.shape[0] != total \
                or bonus_token_ids.shape != (batch, 1):
            raise ValueError("wrong shapes for vLLM's flattened layout")
        if sampling_metadata.all_greedy or not sampling_metadata.all_random:
            raise ValueError("random sampling expected")
        k = max_spec_len
        q = draft_probs.double().reshape(batch, k, -1)
        bonus = torch.nn.functional.one_hot(bonus_token_ids.reshape(batch), q.shape[-1]).double()
        p = torch.cat([target_probs.double().reshape(batch, k, -1), bonus[:, None]], 1)
        n, y = reference(draft_token_ids.reshape(batch, k), q, p)
        out = torch.full((batch, k + 1), -1, dtype=torch.int32)
        for b in range(batch):
            out[b, :n[b]] = draft_token_ids.reshape(batch, k)[b, :n[b]].int()
            out[b, n[b]] = y[b]
        return out

    return rejection_sample


def _on_the_cpu(monkeypatch):
    """The adapter moves its inputs to "cuda": here they stay on the CPU."""
    to, ones, arange = torch.Tensor.to, torch.ones, torch.arange

    def strip(kwargs):
        return {k: v for k, v in kwargs.items() if not (k == "device" and v == "cuda")}

    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **kw: self if a[:1] == ("cuda",) else to(self, *a, **kw))
    monkeypatch.setattr(torch, "ones", lambda *a, **kw: ones(*a, **strip(kw)))
    monkeypatch.setattr(torch, "arange", lambda *a, **kw: arange(*a, **strip(kw)))


def test_oracle_vllm_sampler_adapter_passes_the_oracle_against_vllms_layout(monkeypatch):
    """With a stand-in for vLLM's rejection_sample that follows its documented layout, the adapter's reshaping
    (flattened drafts, running sums, k target positions, a bonus drawn from position k + 1, the emitted count from
    the -1 placeholders) gives a sampler that passes check_sampler; the running sums are int32, max_spec_len k."""
    seen = []
    _fake_module(monkeypatch, "vllm.v1.sample.rejection_sampler", rejection_sample=_vllm_rejection_sample(seen))
    _on_the_cpu(monkeypatch)
    torch.manual_seed(0)  # the stand-in, like vLLM, draws from the global generator
    verdict = oracle.check_sampler(script("oracle_vllm")["vllm_sampler"], rows=3000)
    assert verdict.ok, str(verdict)
    assert set(seen) == {(3, torch.int32)}


def test_oracle_vllm_generator_adapter_asks_vllm_for_what_the_oracle_samples(monkeypatch):
    """The engine gets the pair, float32, the seed, 3 draft tokens from the draft model; the sampling settings
    (top-k 0, minibass's 'off', as vLLM's -1) and exactly n_tokens new tokens, the prompt once per sample; the
    token ids come back as lists."""
    made = {}

    class LLM:
        def __init__(self, **kwargs):
            made["llm"] = kwargs

        def generate(self, prompts, params):
            made["prompts"], made["params"] = prompts, params
            return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=(i, i + 1))]) for i in range(len(prompts))]

    _fake_module(monkeypatch, "vllm", LLM=LLM, SamplingParams=lambda **kwargs: kwargs)
    generate = script("oracle_vllm")["vllm_generator"]
    for top_k, engine_top_k in ((0, -1), (3, 3)):
        out = generate(Path("t"), Path("d"), (5, 6), 4, 3, SamplingParams(0.7, top_k, 0.9), 11)
        assert out == [[0, 1], [1, 2], [2, 3]]
        assert made["llm"] == dict(model="t", dtype="float32", skip_tokenizer_init=True, seed=11, enforce_eager=True,
                                   speculative_config={"method": "draft_model", "model": "d",
                                                       "num_speculative_tokens": 3})
        assert made["params"] == dict(temperature=0.7, top_k=engine_top_k, top_p=0.9, max_tokens=4, min_tokens=4,
                                      ignore_eos=True, detokenize=False)
        assert made["prompts"] == [{"prompt_token_ids": [5, 6]}] * 3


def test_oracle_sglang_adapter_asks_for_a_standalone_chain_and_shuts_the_engine_down(monkeypatch):
    """SGLang's Engine gets the pair, float32, the seed, a standalone draft chain of 3 steps (top-k 1, 4 draft
    tokens: the 3 drafts and the verified one); the prompt once per sample, exactly n_tokens new tokens; the
    engine is shut down after, also when generate raises."""
    made = {"shutdown": 0}

    class Engine:
        def __init__(self, **kwargs):
            made["engine"] = kwargs

        def generate(self, input_ids, sampling_params):
            made["input_ids"], made["params"] = input_ids, sampling_params
            if made.get("fail"):
                raise RuntimeError("engine broke")
            return [{"output_ids": (i, 7)} for i in range(len(input_ids))]

        def shutdown(self):
            made["shutdown"] += 1

    _fake_module(monkeypatch, "sglang", Engine=Engine)
    generate = script("oracle_sglang")["sglang_generator"]
    assert generate(Path("t"), Path("d"), [5, 6], 4, 2, SamplingParams(0.7, 0, 0.9), 11) == [[0, 7], [1, 7]]
    assert made["engine"] == dict(model_path="t", dtype="float32", skip_tokenizer_init=True, random_seed=11,
                                  speculative_algorithm="STANDALONE", speculative_draft_model_path="d",
                                  speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    assert made["params"] == {"temperature": 0.7, "top_k": -1, "top_p": 0.9, "max_new_tokens": 4,
                              "min_new_tokens": 4, "ignore_eos": True}
    assert made["input_ids"] == [[5, 6], [5, 6]] and made["shutdown"] == 1
    made["fail"] = True
    with pytest.raises(RuntimeError, match="engine broke"):
        generate(Path("t"), Path("d"), [5, 6], 4, 2, SamplingParams(), 11)
    assert made["shutdown"] == 2


def test_without_the_engine_the_recipes_load_and_the_oracle_names_what_is_missing(monkeypatch):
    """Neither engine is a dependency: the scripts load without them, and a check of an adapter whose engine is
    missing fails every row with the import error named, rather than crashing."""
    monkeypatch.setitem(sys.modules, "vllm", None)  # absent, even where it is installed
    monkeypatch.setitem(sys.modules, "sglang", None)
    verdict = oracle.check_sampler(script("oracle_vllm")["vllm_sampler"], rows=100)
    assert verdict.checks and not any(c.passed for c in verdict.checks)
    assert all("vllm" in c.detail for c in verdict.checks)
    sglang_generator = script("oracle_sglang")["sglang_generator"]
    with pytest.raises(ImportError, match="sglang"):
        sglang_generator(Path("t"), Path("d"), [1], 1, 1, SamplingParams(), 0)


def _spy_checks(monkeypatch, ok: bool) -> dict:
    """oracle.check_sampler and check_generator replaced by ones that record their arguments and pass or fail."""
    seen = {}

    def spy(kind):
        def check(fn, **kwargs):
            seen[kind] = dict(kwargs, fn=fn.__name__)
            v = Verdict(kind)
            v.add("stand-in", "", 0 if ok else 1, 0)
            return v
        return check

    monkeypatch.setattr(oracle, "check_sampler", spy("sampler"))
    monkeypatch.setattr(oracle, "check_generator", spy("generator"))
    return seen


@pytest.mark.parametrize("ok", [True, False])
def test_the_engine_recipes_run_the_check_asked_and_exit_by_its_verdict(monkeypatch, capsys, ok):
    """oracle_vllm.py runs the sampler check by default or when asked, the generator check when asked; both
    recipes check generators with head_dim 64 and 8 tokens (past the bonus token after 3 drafts); exit 0 on a pass,
    1 on a failure, the verdict printed."""
    vllm, sglang = SCRIPTS / "oracle_vllm.py", SCRIPTS / "oracle_sglang.py"
    for path, argv, kind, fn, extra in (
            (vllm, [], "sampler", "vllm_sampler", {}),
            (vllm, ["sampler"], "sampler", "vllm_sampler", {}),
            (vllm, ["generator"], "generator", "vllm_generator", dict(n_tokens=8, head_dim=64)),
            (sglang, [], "generator", "sglang_generator", dict(n_tokens=8, head_dim=64))):
        seen = _spy_checks(monkeypatch, ok)
        _fake_module(monkeypatch, "vllm")
        _fake_module(monkeypatch, "sglang")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert run_as_main(path, argv, monkeypatch) == (0 if ok else 1)
        assert list(seen) == [kind]
        assert {k: v for k, v in seen[kind].items() if k != "name"} == dict(fn=fn, **extra)
        assert f"{kind}: {'PASS' if ok else 'FAIL'}" in capsys.readouterr().out


@pytest.mark.parametrize("name,argv", [("oracle_vllm", ["samplr"]), ("oracle_vllm", ["sampler", "generator"]),
                                       ("oracle_sglang", ["generator"])])
def test_an_engine_recipe_refuses_an_unknown_argument_with_a_usage_error_and_checks_nothing(monkeypatch, capsys,
                                                                                             name, argv):
    seen = _spy_checks(monkeypatch, True)
    _fake_module(monkeypatch, "vllm")
    _fake_module(monkeypatch, "sglang")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run_as_main(SCRIPTS / f"{name}.py", argv, monkeypatch) == 2
    assert "usage:" in capsys.readouterr().err
    assert seen == {}


@pytest.mark.parametrize("name", ["oracle_vllm", "oracle_sglang"])
def test_an_engine_recipes_help_names_every_exit_status(monkeypatch, capsys, name):
    seen = _spy_checks(monkeypatch, True)
    assert run_as_main(SCRIPTS / f"{name}.py", ["--help"], monkeypatch) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "0 the engine passed the oracle, 1 it failed, 2 a usage error, 3" in help_text
    assert seen == {}


@pytest.mark.parametrize("name,engine,argv", [("oracle_vllm", "vllm", ["generator"]), ("oracle_vllm", "vllm", []),
                                              ("oracle_sglang", "sglang", [])])
@pytest.mark.parametrize("missing", ["engine", "gpu"])
def test_an_engine_recipe_without_its_engine_or_a_gpu_says_so_and_exits_3_not_1(monkeypatch, capsys, name, engine,
                                                                                argv, missing):
    """Exit 1 means the engine failed the oracle; a missing engine or GPU is another answer, and checks nothing."""
    seen = _spy_checks(monkeypatch, True)
    if missing == "engine":
        monkeypatch.setitem(sys.modules, engine, None)  # absent, even where it is installed
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    else:
        _fake_module(monkeypatch, engine)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_as_main(SCRIPTS / f"{name}.py", argv, monkeypatch) == 3
    err = capsys.readouterr().err
    assert f"needs {dict(vllm='vLLM', sglang='SGLang')[engine]} and a CUDA GPU" in err
    assert (engine if missing == "engine" else "no CUDA device") in err and "nothing was checked" in err
    assert seen == {}


# --- host_work.py ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--batch", "0"], ["--draft-length", "0"], ["--rounds", "0"], ["--threads", "0"],
                                  ["--touch-mib", "4", "-1"], ["--temperature", "-0.5"], ["--temperature", "nan"]])
def test_host_work_refuses_bad_options_before_loading_anything(argv, monkeypatch):
    monkeypatch.setattr(minibass.zoo, "load_demo_pair", lambda: pytest.fail("loaded the pair"))
    message = "--batch, --draft-length, --rounds and --threads must be >= 1, --touch-mib and --temperature >= 0"
    with pytest.raises(ValueError, match=message):
        script("host_work")["main"](argv)


def test_host_work_stand_ins_accept_every_draft_and_decode_as_regular_decoding_does():
    """The stand-ins are models the loop takes as they are: the target's greedy tokens are the draft's, so every
    draft is accepted (k + 1 tokens a step), and speculative decoding gives what regular decoding gives."""
    stand_in = script("host_work")["StandIn"]
    target, draft = stand_in(50, 0), stand_in(50, 0.5)
    prompts, greedy = [[1, 2, 3], [4, 5], [49]], SamplingParams(temperature=0)
    spec = minibass.speculative_generate(target, draft, prompts, 12, sampling=greedy, draft_length=3)
    assert spec.tokens == minibass.generate(target, prompts, 12, sampling=greedy).tokens
    assert spec.stats.accepted_tokens == spec.stats.proposed_tokens == 3 * 3 * 3
    assert spec.stats.steps == 3  # 12 tokens, 4 a step
    assert draft.weights.numel() * 4 == 2**19 and target.weights.numel() * 4 == 1024  # half a MiB; one row for 0


def test_host_work_per_step_is_wall_time_less_forward_time_over_the_steps(monkeypatch):
    """Over the batches: the runs' wall times (prefill included, as in the demo's reading) less the seconds
    inside both models' forward calls, over all the steps, in microseconds; greedy unless a temperature is
    given, seed 0."""
    g = script("host_work")["main"].__globals__  # what the script's functions read
    runs = iter([(0.010, 4), (0.006, 4), (0.010, 4), (0.006, 4)])
    temperatures = []

    def speculative_generate(target, draft, prompts, max_new_tokens, **kwargs):
        assert kwargs["draft_length"] == 3 and max_new_tokens == 48 and kwargs["seed"] == 0
        temperatures.append(kwargs["sampling"].temperature)
        wall, steps = next(runs)
        return SimpleNamespace(stats=SimpleNamespace(wall_time=wall, steps=steps))

    @contextlib.contextmanager
    def forward_clock(*models, device):
        assert models == ("target", "draft") and device == "cpu"
        yield {"seconds": 0.012}

    monkeypatch.setattr(minibass, "speculative_generate", speculative_generate)
    monkeypatch.setitem(g, "forward_clock", forward_clock)
    assert g["host_us_per_step"]("target", "draft", [[[1]], [[2]]], 3) == pytest.approx(1e6 * 0.004 / 8)
    assert g["host_us_per_step"]("target", "draft", [[[1]], [[2]]], 3, 0.8) == pytest.approx(1e6 * 0.004 / 8)
    assert temperatures == [0, 0, 0.8, 0.8]


def test_host_work_counts_a_stand_ins_weight_read_as_forward_time(monkeypatch):
    """With the real forward clock: every call of either stand-in, weight read included, is forward time, so a
    run whose calls each take 1 s by the clock has host work of (wall time - 1 s x calls) / steps."""
    from minibass.bench import common

    g = script("host_work")["main"].__globals__
    calls = []

    def timed(fn, *, device):
        calls.append(device)
        return 1.0, fn()

    monkeypatch.setattr(common, "timed", timed)
    stand_in = g["StandIn"]
    target, draft = stand_in(50, 0.01), stand_in(50, 0.01)
    walls = []
    real = minibass.speculative_generate
    monkeypatch.setattr(minibass, "speculative_generate",
                        lambda *a, **kw: walls.append(real(*a, **kw)) or walls[-1])
    us = g["host_us_per_step"](target, draft, [[[1, 2, 3]], [[4, 5]]], 2)
    steps = sum(r.stats.steps for r in walls)
    assert len(calls) == sum(r.stats.target_calls + r.stats.draft_calls for r in walls) > 0
    assert set(calls) == {"cpu"}
    assert us == pytest.approx(1e6 * (sum(r.stats.wall_time for r in walls) - len(calls)) / steps)


def test_host_work_regular_step_is_wall_time_over_steps(monkeypatch):
    """The regular step: regular decoding's wall time (prefill included) over its steps, over the batches;
    greedy unless a temperature is given, seed 0."""
    g = script("host_work")["main"].__globals__
    runs = iter([(0.030, 10), (0.010, 10)] * 2)
    temperatures = []

    def generate(model, prompts, max_new_tokens, *, sampling, seed):
        assert model == "target" and max_new_tokens == 48 and seed == 0
        temperatures.append(sampling.temperature)
        wall, steps = next(runs)
        return SimpleNamespace(stats=SimpleNamespace(wall_time=wall, steps=steps))

    monkeypatch.setattr(minibass, "generate", generate)
    assert g["regular_ms_per_step"]("target", [[[1]], [[2]]]) == pytest.approx(1e3 * 0.040 / 20)
    assert g["regular_ms_per_step"]("target", [[[1]], [[2]]], 0.8) == pytest.approx(1e3 * 0.040 / 20)
    assert temperatures == [0, 0, 0.8, 0.8]


def test_host_work_prints_each_configurations_median_after_the_warm_up_round(monkeypatch, capsys):
    """One row per --touch-mib and one for the demo pair: the median of the rounds after the first (a warm-up),
    and that over the median regular step of the same rounds. Every configuration runs once in each round;
    --threads reaches torch."""
    g = script("host_work")["main"].__globals__
    tokenizer = minibass.load_tokenizer(minibass.zoo.demo_paths()[0])
    monkeypatch.setattr(minibass.zoo, "load_demo_pair", lambda: (SimpleNamespace(vocab_size=64), "draft", tokenizer))
    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    calls = []
    host = {0: [9e9, 400, 420, 410], 5: [9e9, 800, 700, 900], "pair": [9e9, 1000, 1200, 1100]}
    regular = iter([99.0, 4.0, 5.0, 3.0])

    def host_us_per_step(target, draft, batches, k, temperature):
        key = "pair" if draft == "draft" else round(target.weights.numel() * 4 / 2**20)  # MiB the stand-ins read
        calls.append(key)
        assert k == 2 and [len(b) for b in batches] == [4, 4] and temperature == 0
        return host[key][sum(c == key for c in calls) - 1]

    monkeypatch.setitem(g, "host_us_per_step", host_us_per_step)
    monkeypatch.setitem(g, "regular_ms_per_step", lambda target, batches, temperature: next(regular))
    g["main"](["--batch", "4", "--draft-length", "2", "--touch-mib", "0", "5", "--rounds", "3", "--threads", "1"])
    assert calls == [0, 5, "pair"] * 4 and threads == [1]
    out = capsys.readouterr().out
    assert "batch 4, k = 2, 8 held-out prompts" in out and "median of 3 rounds" in out
    assert "step (prefill included): 4.00 ms" in out
    lines = out.splitlines()
    assert [(line.split()[-3], line.split()[-1]) for line in lines[2:]] == [
        ("410", "0.102"), ("800", "0.200"), ("1100", "0.275")]
    assert lines[2].startswith("stand-ins, 0 MiB read per call") and lines[4].startswith("the demo pair")


def test_host_work_passes_its_temperature_to_every_run_and_says_so(monkeypatch, capsys):
    """--temperature reaches every speculative run and every regular step, and the first line names it."""
    g = script("host_work")["main"].__globals__
    tokenizer = minibass.load_tokenizer(minibass.zoo.demo_paths()[0])
    monkeypatch.setattr(minibass.zoo, "load_demo_pair", lambda: (SimpleNamespace(vocab_size=64), "draft", tokenizer))
    seen = []
    monkeypatch.setitem(g, "host_us_per_step", lambda target, draft, batches, k, t: seen.append(t) or 100.0)
    monkeypatch.setitem(g, "regular_ms_per_step", lambda target, batches, t: seen.append(t) or 1.0)
    g["main"](["--touch-mib", "0", "--rounds", "1", "--temperature", "0.8"])
    assert seen == [0.8] * 6  # two rounds (one a warm-up): a stand-in pair, the demo pair, the regular step
    assert "48 new temperature-0.8 tokens" in capsys.readouterr().out.splitlines()[0]


# --- grad_mode.py ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--batch", "0"], ["--draft-length", "0"], ["--rounds", "0"]])
def test_grad_mode_refuses_bad_options_before_loading_anything(argv, monkeypatch):
    monkeypatch.setattr(minibass.zoo, "load_demo_pair", lambda: pytest.fail("loaded the pair"))
    with pytest.raises(ValueError, match="--batch, --draft-length and --rounds must be >= 1"):
        script("grad_mode")["main"](argv)


def test_grad_mode_compares_the_shipped_loops_with_their_bodies_under_no_grad():
    """inference_mode: minibass's own functions; no_grad: the same bodies with inference mode off and grad off.
    Both decode the same tokens."""
    runs = script("grad_mode")["modes"]()
    assert runs["inference_mode"] == (minibass.generate, minibass.speculative_generate)
    model = minibass.TableLM.random(6, order=1, seed=3)
    modes = []
    forward = model.forward

    def recording(*args, **kwargs):
        modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        return forward(*args, **kwargs)

    model.forward = recording
    greedy = SamplingParams(temperature=0)
    tokens = {}
    for name, (regular, speculative) in runs.items():
        modes.clear()
        tokens[name] = (regular(model, [[1, 2]], 5, sampling=greedy).tokens,
                        speculative(model, model, [[1, 2]], 5, sampling=greedy, draft_length=2).tokens)
        assert modes and set(modes) == {(True, False) if name == "inference_mode" else (False, False)}
    assert tokens["inference_mode"] == tokens["no_grad"]


def test_grad_mode_times_each_run_over_the_batches_with_fresh_rotary_tables():
    """One run: every batch, 48 greedy tokens, regular decoding when k is None and speculative with k otherwise;
    both models' rotary tables are dropped first, so that every run builds them once."""
    seconds = script("grad_mode")["seconds"]
    target, draft = SimpleNamespace(rope_cache="old"), SimpleNamespace(rope_cache="old")
    calls = []

    def run(*args, sampling, **kwargs):
        assert sampling.greedy and target.rope_cache is None and draft.rope_cache is None
        calls.append((args, kwargs))

    batches = [[[1, 2]], [[3]]]
    assert seconds(run, target, draft, batches, None) >= 0
    assert calls == [((target, [[1, 2]], 48), {}), ((target, [[3]], 48), {})]
    calls.clear()
    seconds(run, target, draft, batches, 3)
    assert calls == [((target, draft, b, 48), {"draft_length": 3}) for b in batches]


def test_grad_mode_prints_the_medians_after_the_warm_up_round_and_their_ratios(monkeypatch, capsys):
    """Each round runs both modes, in an order that alternates; the first round is dropped; the speed-up is
    the regular median over the speculative one, and the last lines inference_mode over no_grad."""
    g = script("grad_mode")["main"].__globals__
    tokenizer = minibass.load_tokenizer(minibass.zoo.demo_paths()[0])
    monkeypatch.setattr(minibass.zoo, "load_demo_pair", lambda: ("target", "draft", tokenizer))
    monkeypatch.setitem(g, "modes", lambda: {"inference_mode": ("gen-i", "spec-i"), "no_grad": ("gen-n", "spec-n")})
    times = {"gen-i": [99, 2.0, 1.0, 3.0], "spec-i": [99, 1.0, 2.0, 1.5],
             "gen-n": [99, 4.0, 2.0, 3.0], "spec-n": [99, 2.0, 2.5, 3.0]}
    order = []

    def seconds(run, target, draft, batches, k):
        assert (target, draft, [len(b) for b in batches]) == ("target", "draft", [2, 2, 2, 2])
        assert k == (None if run.startswith("gen") else 3)
        order.append(run)
        return times[run][sum(r == run for r in order) - 1]

    monkeypatch.setitem(g, "seconds", seconds)
    g["main"](["--batch", "2", "--draft-length", "3", "--rounds", "3"])
    assert order == (["gen-n", "spec-n", "gen-i", "spec-i", "gen-i", "spec-i", "gen-n", "spec-n"] * 2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("batch 2, k = 3, 8 held-out prompts") and "median of 3 rounds" in lines[0]
    assert lines[2].split() == ["inference_mode", "2.000", "1.500", "1.33x"]
    assert lines[3].split() == ["no_grad", "3.000", "2.500", "1.20x"]
    assert lines[4:] == ["inference_mode / no_grad, regular: 0.667", "inference_mode / no_grad, speculative: 0.600"]


# --- docs/hooks.py -----------------------------------------------------------------------------------------------

def test_the_docs_hook_copies_every_plot_and_only_plots_into_the_site_sources_on_every_build(tmp_path):
    """The plots of bench_results/ (beside mkdocs.yml) are copied into docs/bench/, not their JSON; a second
    build (``mkdocs serve`` rebuilds) copies again over the first."""
    hooks = runpy.run_path(str(ROOT / "docs" / "hooks.py"))
    docs = tmp_path / "docs"
    docs.mkdir()
    config = {"config_file_path": str(ROOT / "mkdocs.yml"), "docs_dir": str(docs)}
    plots = sorted(p.name for p in (ROOT / "bench_results").glob("*.png"))
    assert plots
    for _ in range(2):
        hooks["on_pre_build"](config)
        assert sorted(p.name for p in (docs / "bench").iterdir()) == plots
    assert (docs / "bench" / plots[0]).read_bytes() == (ROOT / "bench_results" / plots[0]).read_bytes()


def test_the_docs_hook_points_every_plot_link_at_its_copy_and_leaves_other_mentions(tmp_path):
    """In docs/benchmarks.md every image link into ../bench_results/ is pointed at bench/ (where the plot was
    copied); mentions of bench_results/ that are not links stay as written."""
    hooks = runpy.run_path(str(ROOT / "docs" / "hooks.py"))
    page = ("![a](../bench_results/a-cpu.png) then ![b](../bench_results/b-cuda.png)\n"
            "from `bench_results/a-cpu.json`, see bench_results/ and [the folder](../bench_results)\n")
    assert hooks["on_page_markdown"](page, page=None, config={}, files=None) == (
        "![a](bench/a-cpu.png) then ![b](bench/b-cuda.png)\n"
        "from `bench_results/a-cpu.json`, see bench_results/ and [the folder](../bench_results)\n")
    # The real page: every plot it links exists, and no link into ../bench_results/ is left for the site.
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    links = re.findall(r"\]\(\.\./bench_results/([^)]+)\)", text)
    assert all((ROOT / "bench_results" / name).is_file() for name in links)
    assert "../bench_results/" not in hooks["on_page_markdown"](text, page=None, config={}, files=None)
