"""Edges of the course machinery (minibass/course/): each fast exercise check passes its chapter's reference
solution in-process and fails the near misses learners write; the report; the learner notebooks keep every
cell of their chapter; the command line passes its options on; ``execute`` keeps what each cell printed and
drew and stops at a cell that raises."""

from __future__ import annotations

import os
import sys

import nbformat
import pytest
import torch

import minibass.course as course
from minibass import costmodel
from minibass.course import Report, checks
from minibass.course import build as course_build
from minibass.course import execute as course_execute
from minibass.course.__main__ import main as course_main
from test_course import _assembled_step, _namespace

CHAPTERS = course_build.chapters()


def _code(path) -> str:
    notebook = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in notebook.cells if c.cell_type == "code")


# ---- the checks pass the chapters' reference solutions (the chapters do it too, but as slow scripts) ---------

REFERENCES = {  # chapter -> (check, names from its exercise cells, kwargs)
    "01": (checks.check_roofline, ("roofline_time", "critical_batch"), {}),
    "02": (checks.check_positions, ("positions_of",), {}),
    "03": (checks.check_accept_resample, ("accept_probability", "residual"), {}),
    "05": (checks.check_kept_lengths, ("kept_lengths",), {}),
    "06": (checks.check_padded_attention, ("padded_attention",), {"cases": 21}),
    "07": (checks.check_online_softmax, ("online_softmax_step",), {}),
    "08": (checks.check_step, ("my_step",), {}),
    "11": (checks.check_adapter, ("wrap",), {"rows": 2_000}),
}


@pytest.mark.parametrize("prefix", sorted(REFERENCES))
def test_check_passes_the_chapters_reference_solution(prefix):
    check, names, kwargs = REFERENCES[prefix]
    ns = _namespace(prefix, stubbed=False)
    report = check(*(ns[n] for n in names), quiet=True, **kwargs)
    assert report.passed and report.cases > 0, str(report)
    assert str(report).startswith(f"Passed: {report.name} ({report.cases} ")


# ---- the checks fail the near misses -------------------------------------------------------------------------

@pytest.mark.parametrize("off", [1, -1])
def test_the_roofline_check_fails_a_critical_batch_one_off(off):
    report = checks.check_roofline(lambda f, b, peak, bw: max(f / peak, b / bw),
                                   lambda shape, hw: costmodel.critical_batch(shape, hw) + off, quiet=True)
    assert not report.passed and report.error is None and len(report.rows) == 2 * len(costmodel.GPUS), str(report)


def test_the_roofline_check_is_exact_not_nearly_right():
    """The step time is max(flops / peak, bytes / bandwidth), nothing else: an answer 0.1 % off is wrong."""
    report = checks.check_roofline(lambda f, b, peak, bw: 1.001 * max(f / peak, b / bw), costmodel.critical_batch,
                                   quiet=True)
    assert not report.passed and len(report.rows) == 20, str(report)


def test_the_positions_check_wants_long_positions_and_hints_only_at_an_empty_float_tensor():
    reference = _namespace("02", stubbed=False)["positions_of"]

    def float_when_not_empty(q_lens, lengths):  # the right numbers, float where there are any
        out = reference(q_lens, lengths)
        return out.float() if out.numel() else out

    report = checks.check_positions(float_when_not_empty, quiet=True)
    assert not report.passed and "a long tensor" in str(report) and "torch.float32" in str(report), str(report)
    assert report.hint is None, "the empty-tensor hint shown for a non-empty float answer"

    def float_when_empty(q_lens, lengths):
        out = reference(q_lens, lengths)
        return out if out.numel() else torch.tensor([])

    report = checks.check_positions(float_when_empty, quiet=True)
    assert not report.passed and "torch.tensor([]) is float32" in str(report), str(report)


def test_the_acceptance_check_fails_a_residual_smoothed_away_from_zero():
    """max(p - q, 1e-6) 'to avoid dividing by zero' puts a little mass where p < q: off by about 1e-6, not exact."""
    def smoothed(p, q):
        r = (p - q).clamp(min=1e-6)
        return r / r.sum()

    ns = _namespace("03", stubbed=False)
    report = checks.check_accept_resample(ns["accept_probability"], smoothed, quiet=True)
    assert not report.passed and report.error is None and "enumeration" in str(report), str(report)


def test_the_acceptance_check_fails_a_residual_divided_by_its_positive_mass_but_not_clamped():
    """(p - q) / sum(max(0, p - q)) has the right total on the positive side and negative entries besides: not
    a distribution (a program could not draw from it), though clamping it would make it right."""
    ns = _namespace("03", stubbed=False)
    report = checks.check_accept_resample(ns["accept_probability"], lambda p, q: (p - q) / (p - q).clamp(min=0).sum(),
                                          quiet=True)
    assert not report.passed and report.error is None and "enumeration" in str(report), str(report)


def _merged_blocks(m_i, l_i, acc, scores, v):
    """The online softmax as FlashAttention-1 writes it: each block normalised by its own maximum, then merged.
    Right on every block with a visible key; NaN on a block whose keys are all masked (its maximum is -inf)."""
    m_block = scores.max(1).values
    p = torch.exp(scores - m_block[:, None])
    m_new = torch.maximum(m_i, m_block)
    alpha, beta = torch.exp(m_i - m_new), torch.exp(m_block - m_new)
    return m_new, alpha * l_i + beta * p.sum(1), alpha[:, None] * acc + beta[:, None] * (p @ v)


def _floored(m_i, l_i, acc, scores, v):
    """exp floored at 1e-8 'to avoid zeros': masked keys get a little weight, off by about 1e-8."""
    m_new = torch.maximum(m_i, scores.max(1).values)
    alpha = torch.exp(m_i - m_new)
    p = torch.exp(scores - m_new[:, None]).clamp(min=1e-8)
    return m_new, alpha * l_i + p.sum(1), alpha[:, None] * acc + p @ v


@pytest.mark.parametrize("step_fn, case", [(_merged_blocks, 13), (_floored, None)],
                         ids=["block maxima merged, a fully masked block", "exp floored at 1e-8"])
def test_the_online_softmax_check_fails_the_near_misses(step_fn, case):
    report = checks.check_online_softmax(step_fn, quiet=True)
    assert not report.passed and report.error is None, str(report)
    if case is not None:
        assert [row["case"] for row in report.rows] == [case], str(report)


def test_the_step_check_samples_too_and_fails_a_step_right_only_when_greedy():
    report = checks.check_step(_assembled_step(q_from_p=True), quiet=True)
    assert not report.passed and report.error is None, str(report)
    assert "sampled, k=3: G-test of 3000 samples of 3 tokens" in [row["check"] for row in report.rows], str(report)


def _one_draft(s, target, draft, draft_lens, *rest):
    """minibass's step drafting one token whatever length the loop asked for: exact, and not the step asked for."""
    from minibass.speculative import step

    return step(s, target, draft, draft_lens.clamp(max=1), *rest)


def test_the_step_check_fails_a_step_that_drafts_one_token_whatever_it_is_asked():
    """Greedy runs on llama_pair accept at most one draft per step on these prompts, so only the seeded sampled
    run tells this step from minibass's."""
    report = checks.check_step(_one_draft, quiet=True)
    assert not report.passed and "sampled, k=3, seed 0" in str(report), str(report)


def test_a_bool_is_not_read_as_a_whole_number():
    assert checks._whole(3) == 3 and checks._whole(3.0) == 3
    for value in (True, False, 3.5):
        with pytest.raises(ValueError):
            checks._whole(value)


def test_the_adapter_check_names_a_generator_that_is_ignored():
    import numpy as np

    def fixed_seed(foreign):
        def sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
            rng = np.random.default_rng(0)  # the torch generator never read
            outs = [foreign(draft_tokens[b].tolist(), draft_probs[b].double().numpy(),
                            target_probs[b].double().numpy(), rng) for b in range(len(draft_tokens))]
            return torch.tensor([len(o) - 1 for o in outs]), torch.tensor([o[-1] for o in outs])
        return sampler

    report = checks.check_adapter(fixed_seed, rows=2_000, quiet=True)
    assert not report.passed and "the torch generator is ignored" in str(report), str(report)


def test_a_none_error_in_the_learners_own_step_gets_no_hint_meant_for_the_loop():
    """The 'return n' hint is for the TypeError the loop's ``_record`` raises on a step that returned None."""
    def broken(*args):
        total = None
        return total + 1  # TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'

    error = checks.check_step(broken, quiet=True).error
    assert error.startswith("TypeError") and "'NoneType'" in error and "broken" in error, error
    assert "hint" not in error, error


# ---- the report ------------------------------------------------------------------------------------------------

def test_a_report_that_checked_no_case_fails():
    report = Report("nothing checked")
    assert not report.passed
    assert str(report) == "Failed: nothing checked\n  no case was checked"


def test_a_long_table_says_how_many_rows_it_leaves_out():
    rows = [{"case": i, "got": i} for i in range(8)]
    for shown, left_out in [(6, None), (7, "  ... and 1 more"), (8, "  ... and 2 more")]:
        text = str(Report("r", rows=rows[:shown], cases=8))
        assert text.startswith(f"Failed: r ({shown} of 8 cases differ)")
        assert len([line for line in text.splitlines() if line.startswith("  ") and "..." not in line]) == 2 + 6
        if left_out is None:
            assert "... and" not in text, text
        else:
            assert text.splitlines()[-1] == left_out, text


def test_recorded_cpu_results_are_not_taken_for_gpu_ones(tmp_path):
    (tmp_path / "speculative-cpu.json").write_text((course.ROOT / "bench_results" / "speculative-cpu.json").read_text())
    assert course.gpu_results(tmp_path) == {}
    assert course.gpu_results(tmp_path / "absent") == {}


def test_the_best_speculative_run_is_the_one_described():
    result = {"provenance": {"device": "H100", "torch": "2.4", "triton": "3.0", "date": "2025-01-01", "command": "x"},
              "rows": [{"batch": 8, "regular_tok_s": 1000.0,
                        "runs": [{"speedup": 1.5, "backend": "padded", "draft_length": 2},
                                 {"speedup": 2.25, "backend": "split", "draft_length": 4},
                                 {"speedup": 0.5, "backend": "padded", "draft_length": 8}]}]}
    text = course.describe_gpu_results({"speculative-cuda": result})
    assert "best speculative 2.25x (split, k = 4)" in text, text


def test_size_is_the_small_one_only_in_the_tests_mode(monkeypatch):
    monkeypatch.setattr(course, "FAST", True)
    assert course.size(2, 200) == 2
    monkeypatch.setattr(course, "FAST", False)
    assert course.size(2, 200) == 200


# ---- the learner notebooks ---------------------------------------------------------------------------------------

def test_stub_refuses_a_nested_solution_marker():
    nested = ("def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n    return 1\n"
              "    # END SOLUTION\n    # END SOLUTION\n")
    with pytest.raises(ValueError, match="nested"):
        course_build.stub(nested)


def test_learner_notebooks_keep_every_cell_of_their_chapter(tmp_path):
    """Same cells, in the same order, as the teacher's notebook; only the solution blocks differ (stubs)."""
    learner = course_build.build(tmp_path / "learner")
    teacher = course_build.build(tmp_path / "teacher", solutions=True)
    assert [p.name for p in learner] == [p.name for p in teacher] == [c.stem + ".ipynb" for c in CHAPTERS]
    for mine, theirs, source in zip(learner, teacher, CHAPTERS):
        a, b = nbformat.read(mine, as_version=4), nbformat.read(theirs, as_version=4)
        assert [c.cell_type for c in a.cells] == [c.cell_type for c in b.cells], mine.name
        code = [c.source for c in b.cells if c.cell_type == "code"]
        assert len(code) == len(course_build.cells(source.read_text())), source.name
        assert sum(course_build.BEGIN in c for c in code) == len(course_build.exercise_cells(source)), source.name
        for x, y in zip(a.cells, b.cells):
            want = course_build.stub(y.source) if x.cell_type == "code" else y.source
            assert x.source.rstrip() == want.rstrip(), (mine.name, y.source)
        assert a.metadata["minibass"]["source"] == source.name
        if course_build.exercise_cells(source):
            assert course_build.STUB not in _code(theirs) and course_build.BEGIN in _code(theirs), theirs.name


def test_a_rebuild_returns_every_notebook_also_the_kept_ones(tmp_path):
    first = course_build.build(tmp_path)
    notebook = nbformat.read(first[5], as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("# my note"))
    nbformat.write(notebook, first[5])
    lines = []
    assert course_build.build(tmp_path, report=lines.append) == first
    assert [line.split()[0] for line in lines] == ["wrote"] * 5 + ["kept"] + ["wrote"] * (len(first) - 6)


def test_a_notebook_that_build_did_not_write_is_kept(tmp_path):
    """A notebook with no digest of build's (made by hand, or by another tool) holds someone's work: kept."""
    path = tmp_path / (CHAPTERS[5].stem + ".ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("my own work")]), path)
    lines = []
    course_build.build(tmp_path, report=lines.append)
    assert "my own work" in path.read_text()
    assert f"kept {path}: edited since it was built (--force rewrites it from {CHAPTERS[5].name})" in lines


# ---- the command line -------------------------------------------------------------------------------------------

def test_the_build_command_passes_solutions_and_force_on(tmp_path, capsys):
    chapter = next(p for p in CHAPTERS if p.stem.startswith("05"))
    path = tmp_path / (chapter.stem + ".ipynb")
    assert course_main(["build", str(tmp_path), "--solutions"]) == 0
    assert course_build.STUB not in _code(path) and "return m + n, min(m + k - 1, m + n)" in _code(path)
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("# my note"))
    nbformat.write(notebook, path)
    capsys.readouterr()
    assert course_main(["build", str(tmp_path)]) == 0
    assert f"kept {path}" in capsys.readouterr().out and "# my note" in _code(path)
    assert course_main(["build", str(tmp_path), "--force"]) == 0
    assert "# my note" not in _code(path) and course_build.STUB in _code(path)
    assert "return m + n, min(m + k - 1, m + n)" not in _code(path)


# ---- execute: a chapter run as a script, its outputs kept ----------------------------------------------------------

CHAPTER = """# %% [markdown]
# A chapter.

# %%
import matplotlib.pyplot as plt

print("running as", __name__)
data = open("data.txt").read()

# %%
plt.plot([1, 2, 3])

# %%
print("after the plot:", data)
"""


@pytest.fixture
def chapter(tmp_path):
    folder = tmp_path / "tutorial"
    folder.mkdir()
    (folder / "data.txt").write_text("read from the chapter's folder")
    source = folder / "00_demo.py"
    source.write_text(CHAPTER)
    return source


def test_execute_keeps_each_cells_output_and_its_own_plot(chapter, tmp_path):
    out = tmp_path / "docs" / "00_demo.ipynb"
    cwd, path = os.getcwd(), list(sys.path)
    notebook = course_execute.execute(chapter, out)
    assert os.getcwd() == cwd and sys.path == path
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert [(o.output_type, o.get("text")) for o in code[0].outputs] == [("stream", "running as __main__\n")]
    assert [o.output_type for o in code[1].outputs] == ["display_data"] and "image/png" in code[1].outputs[0].data
    assert [(o.output_type, o.get("text")) for o in code[2].outputs] == [
        ("stream", "after the plot: read from the chapter's folder\n")]  # the plot not shown again
    assert notebook.metadata["minibass"] == {"fast": course.FAST, "threads": torch.get_num_threads()}
    assert nbformat.read(out, as_version=4).cells == notebook.cells
    assert course_execute.up_to_date(chapter, out)


def test_execute_does_not_take_a_figure_the_caller_left_open_for_the_chapters(chapter, tmp_path):
    from minibass.bench.common import pyplot

    plt = pyplot()
    plt.figure()  # e.g. another test's, in the same process
    notebook = course_execute.execute(chapter, tmp_path / "docs" / "00_demo.ipynb")
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert [o.output_type for o in code[0].outputs] == ["stream"]
    assert [o.output_type for o in code[1].outputs] == ["display_data"]
    assert plt.get_fignums() == []


def test_execute_stops_at_a_cell_that_raises_and_names_it(chapter, tmp_path):
    chapter.write_text("# %%\nprint('first')\n\n# %%\nprint('partial')\nx = 1 / 0\n\n# %%\nprint('never')\n")
    out = tmp_path / "docs" / "00_demo.ipynb"
    cwd, path = os.getcwd(), list(sys.path)
    with pytest.raises(course_execute.ChapterError, match=r"00_demo\.py, cell 1: ZeroDivisionError") as info:
        course_execute.execute(chapter, out)
    assert "--- output ---\npartial\n" in str(info.value)
    assert not out.exists()
    assert os.getcwd() == cwd and sys.path == path


def test_execute_command_runs_a_chapter_once_until_it_changes(chapter, tmp_path, capsys):
    docs = tmp_path / "docs"
    out = docs / "00_demo.ipynb"
    assert course_main(["execute", str(chapter), "--out", str(docs)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n" and out.exists()
    assert course_main(["execute", str(chapter), "--out", str(docs)]) == 0
    assert capsys.readouterr().out == f"up to date: {out}\n"
