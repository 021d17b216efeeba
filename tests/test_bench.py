"""The benchmarks' command line and bookkeeping (never their timings): clear usage errors, where
results go, what they record, and the committed tables against the committed JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from minibass.bench import __main__ as bench_cli
from minibass.bench import common
from conftest import ROOT, script as load_script



def usage_error(argv, capsys) -> str:
    """The one line a bad command prints (exit status 2, no traceback)."""
    with pytest.raises(SystemExit) as exit_:
        bench_cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv,message", [
    ([], "no benchmark named"),
    (["fast"], "unknown benchmark 'fast'"),
    (["decode", "--batch-sizes", "0"], "--batch-sizes: expected an int >= 1, got '0'"),
    (["decode", "--reps", "0"], "--reps: expected an int >= 1"),
    (["decode", "--new-tokens", "-1"], "--new-tokens: expected an int >= 1"),
    (["decode", "--backends", "foo"], "unknown backends \\['foo'\\]"),
    (["decode", "--device", "gpu"], "device must be a torch device"),
    (["attention", "--spreads", "-3"], "--spreads: expected a number in \\[0, 1\\)"),
    (["attention", "--reps", "0"], "--reps: expected an int >= 1"),
    (["peers", "--batch-sizes", "0"], "--batch-sizes: expected an int >= 1"),
    (["peers", "--draft-length", "0"], "draft_length must be an int >= 1"),
    (["speculative", "--draft-lengths", "2", "sometimes"], "got 'sometimes'"),
    (["speculative", "--backends", "foo"], "invalid choice: 'foo'"),
    (["speculative", "--temperature", "-1"], "temperature"),
    (["policies", "--batch-sizes", "0"], "--batch-sizes: expected an int >= 1"),
])
def test_bad_options_are_one_line_usage_errors(argv, message, capsys):
    assert re.search(message, usage_error(argv, capsys))


def test_options_given_twice_are_one_and_quick_does_not_override_sizes_silently(capsys):
    from minibass.bench import common

    parser = common.Parser(prog="x")
    parser.add_argument("--backends", nargs="+", default=["padded"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1])
    args = common.parse(parser, ["--backends", "padded", "split", "padded", "--batch-sizes", "4", "1", "4"], "x")
    assert args.backends == ["padded", "split"] and args.batch_sizes == [4, 1]  # the order given, each once
    message = usage_error(["attention", "--quick", "--batches", "2", "--spreads", "0.5"], capsys)
    assert "--quick sets its own sizes; leave out --batches, --spreads or --quick" in message


def test_an_unwritable_result_path_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    """Said at once, not as a traceback when the file is written at the end of the run."""
    from minibass.bench import attention

    monkeypatch.setattr(attention, "run", lambda *a, **k: pytest.fail("ran before checking --out"), raising=False)
    (tmp_path / "a_file").write_text("")
    for argv, message in [
        (["attention", "--quick", "--out", str(tmp_path / "a_file" / "x.json")], "a_file is a file, not a folder"),
        (["attention", "--quick", "--out", str(tmp_path)], "is a folder: --out and --plot name files"),
        (["peers", "--plot", str(tmp_path / "a_file" / "x.png")], "a_file is a file, not a folder"),
        (["policies", "--out", str(tmp_path / "a_file" / "x.json")], "a_file is a file, not a folder"),
    ]:
        assert message in usage_error(argv, capsys)


def test_a_plot_without_matplotlib_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    """Installed without the bench extra, a run would otherwise end in an ImportError after all its work."""
    from minibass.bench import common

    real = common.importlib.util.find_spec
    monkeypatch.setattr(common.importlib.util, "find_spec", lambda name: None if name == "matplotlib" else real(name))
    message = usage_error(["attention", "--quick", "--plot", str(tmp_path / "a.png")], capsys)
    assert "needs matplotlib, which this environment lacks: pip install 'minibass[bench]'" in message


def test_what_minibass_refuses_during_a_run_is_one_line(monkeypatch, capsys):
    """A run whose sizes pass its options but not the model (a prompt plus new tokens past max_seq_len)."""
    from minibass.bench import decode

    def refuses(argv):
        raise ValueError("prompts[0] (32 tokens) + max_new_tokens (5000) exceeds the model's max_seq_len (2048)")

    monkeypatch.setattr(decode, "main", refuses)
    assert "exceeds the model's max_seq_len" in usage_error(["decode", "--new-tokens", "5000"], capsys)


def test_help_lists_the_benchmarks(capsys):
    bench_cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in bench_cli.BENCHMARKS) and "build/bench/" in out


def test_only_the_documented_run_writes_the_committed_results():
    """A trial run (``--quick``, other sizes) goes to build/bench/, never over bench_results/."""
    parser = common.Parser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    assert common.result_path(parser, parser.parse_args([]), "x-cpu.json", None) == Path("bench_results/x-cpu.json")
    for device in ("cpu", "cuda"):  # the device is not a trial option: the GPU run writes its own committed file
        assert common.result_path(parser, parser.parse_args(["--device", device]), "x.json", None).parent == common.RESULTS
    for trial in (["--quick"], ["--reps", "2"]):
        assert common.result_path(parser, parser.parse_args(trial), "x.json", None) == Path("build/bench/x.json")
    assert common.result_path(parser, parser.parse_args(["--quick"]), "x.json", "/tmp/y.json") == Path("/tmp/y.json")
    # A run that names one of its files is not the documented run: the file it leaves unnamed is a trial one.
    assert common.result_path(parser, parser.parse_args(["--out", "/tmp/y.json"]), "x.png", None) == Path("build/bench/x.png")


# For each benchmark: an option that makes its run a trial one (the documented run has none).
TRIAL_OPTION = {"decode": ["--reps", "2"], "attention": ["--quick"], "peers": ["--batch-sizes", "1"],
                "speculative": ["--new-tokens", "4"], "policies": ["--new-tokens", "4"]}


@pytest.mark.parametrize("name", sorted(bench_cli.BENCHMARKS))
def test_each_benchmark_writes_the_committed_file_only_for_its_documented_run(name, monkeypatch):
    import importlib

    module = importlib.import_module(bench_cli.BENCHMARKS[name])
    monkeypatch.setattr(common, "COMMAND", None)  # (parse records the command line: restored afterwards)
    written = []
    monkeypatch.setattr(module, "run", lambda *args, **kwargs: written.append(
        [a for a in (*args, *kwargs.values()) if isinstance(a, Path)]))
    documented = [[]] + ([["--device", "cpu"]] if name != "policies" else [])  # (policies has no --device)
    for argv, folder in [(argv, common.RESULTS) for argv in documented] + [(TRIAL_OPTION[name], common.TRIALS)]:
        written.clear()
        module.main(argv)
        (paths,) = written
        assert paths and all(path.parent == folder for path in paths), (argv, paths)
    if name != "decode":  # (decode writes no plot) a run that names its plot does not write the committed JSON
        written.clear()
        module.main(["--plot", "/tmp/mine.png"])
        (paths,) = written
        assert Path("/tmp/mine.png") in paths and [p.parent for p in paths if p.suffix == ".json"] == [common.TRIALS]


def test_a_small_run_records_its_own_command_and_stays_out_of_the_committed_results(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "COMMAND", None)
    plot = tmp_path / "a plot.png"  # a space: the recorded command must quote it
    bench_cli.main(["attention", "--batches", "1", "--new-tokens", "1", "--spreads", "0", "--reps", "2",
                    "--device", "cpu", "--plot", str(plot)])
    assert not (tmp_path / "bench_results").exists()
    payload = json.loads((tmp_path / "build/bench/attention-cpu.json").read_text())
    made = payload["provenance"]
    assert made["command"] == ("python -m minibass.bench attention --batches 1 --new-tokens 1 --spreads 0 --reps 2 "
                               f"--device cpu --plot '{plot}'")
    timed = payload["timed_calls"]  # naive (and the interpreted kernel) once, the others --reps times
    assert timed["naive"] == 1 and timed["padded"] == timed["split"] == 2 and timed.get("ragged", 1) == 1
    assert len(payload["rows"]) == 1 and plot.exists()
    described = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    assert made["commit"] == (described.stdout.strip() if described.returncode == 0 else None)
    if Path("/proc/cpuinfo").exists():
        assert made["cpu"] and made["cpu"] in Path("/proc/cpuinfo").read_text()


def test_the_benchmark_page_shows_the_tables_of_the_committed_json():
    """Every table ``scripts/bench_tables.py`` renders from bench_results/*-cpu.json is on the page
    (the speculative one for ``padded``, the CPU's default, as the page says)."""
    script = load_script("bench_tables")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    tables = {name: script["load"](name, "cpu") for name in ("decode", "attention", "speculative", "peers", "policies")}
    rendered = [script["decode_table"](tables["decode"]), script["attention_table"](tables["attention"]),
                script["speculative_table"](tables["speculative"], "padded"), script["peers_table"](tables["peers"]),
                script["policies_table"](tables["policies"])]
    rows = [line for table in rendered for line in table.splitlines() if line.startswith("|")]
    assert len(rows) > 20
    missing = [row for row in rows if row not in page]
    assert not missing, f"{len(missing)} table rows differ from the JSON, e.g. {missing[0]}"
