"""The course (tutorial/): every chapter runs, one runs through a real Jupyter kernel, the learner
notebooks are built with stubs, and every exercise check fails on the stub and on a planted wrong
answer (the chapters themselves run each check on its reference solution and must print Passed)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
import torch

from minibass.course import build as course_build
from minibass.course import checks
from minibass.draft_length import expected_tokens

CHAPTERS = course_build.chapters()
ENV = {**os.environ, "MINIBASS_COURSE_FAST": "1", "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}


def test_the_course_has_its_chapters():
    names = [p.stem for p in CHAPTERS]
    assert [n[:2] for n in names] == [f"{i:02d}" for i in range(12)], names


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_as_a_script_and_its_check_passes(chapter):
    """Each source runs as plain Python (no shell magics) with its reference solution; its check passes."""
    run = subprocess.run([sys.executable, chapter.name], cwd=chapter.parent, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    if chapter.stem.startswith("10_"):
        return  # its check compares a prediction with a live timing, which no test asserts (see the recorded run)
    assert "Failed:" not in run.stdout, run.stdout[-3000:]
    if course_build.exercise_cells(chapter):
        assert "Passed:" in run.stdout, run.stdout[-3000:]


def test_chapter_07_runs_where_triton_is_not_installed(tmp_path):
    """Triton installs on Linux only: on a Mac the kernel's cell says so, and the rest of the chapter runs."""
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("raise ImportError('no Triton on this platform')\n")
    chapter = next(c for c in CHAPTERS if c.stem.startswith("07_"))
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(chapter.parents[1])])}
    run = subprocess.run([sys.executable, chapter.name], cwd=chapter.parent, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Triton is not installed here" in run.stdout and "max error per packed query" not in run.stdout
    assert "Passed:" in run.stdout, run.stdout[-3000:]


def test_a_chapter_runs_in_a_real_jupyter_kernel(tmp_path):
    """Chapter 03 as a notebook (with solutions) through ipykernel: no error output, a plot, the check passes."""
    nbclient = pytest.importorskip("nbclient", reason="install the tutorial extra: pip install -e '.[tutorial]'")
    import nbformat

    paths = course_build.build(tmp_path, solutions=True)
    path = next(p for p in paths if p.stem.startswith("03_"))
    notebook = nbformat.read(path, as_version=4)
    old = os.environ.copy()
    os.environ.update({"MINIBASS_COURSE_FAST": "1"})
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(course_build.CHAPTERS)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the chapter's plot is missing"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Passed:" in text and "Failed:" not in text
    shown = text + "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert shown.count("Passed:") == 1, "the check's report is shown more than once"


def test_learner_notebooks_have_stubs_instead_of_solutions(tmp_path):
    import nbformat

    for path, source in zip(course_build.build(tmp_path), CHAPTERS):
        notebook = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
        assert course_build.BEGIN not in code and course_build.END not in code
        n_exercises = len(course_build.exercise_cells(source))
        if n_exercises:
            assert course_build.STUB in code and "from minibass.course.checks import check_" in code, path.name
        assert any(c.cell_type == "markdown" for c in notebook.cells)


def test_rebuilding_keeps_a_learners_edits_and_refreshes_the_rest(tmp_path):
    import nbformat

    first = course_build.build(tmp_path)
    ran, mine = first[0], first[3]
    notebook = nbformat.read(ran, as_version=4)  # run, not edited: outputs only
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [nbformat.v4.new_output("stream", text="out")], 1
    nbformat.write(notebook, ran)
    notebook = nbformat.read(mine, as_version=4)  # an answer typed in
    cell = next(c for c in notebook.cells if course_build.STUB in c.source)
    cell.source = cell.source.replace(course_build.STUB, "return 42  # my answer")
    nbformat.write(notebook, mine)
    lines = []
    course_build.build(tmp_path, report=lines.append)
    assert "my answer" in mine.read_text(), "a rebuild lost the learner's answer"
    assert "out" not in "".join(o.get("text", "") for c in nbformat.read(ran, as_version=4).cells
                                for o in c.get("outputs", [])), "an unedited notebook was not rebuilt"
    assert [line for line in lines if line.startswith("kept")] == [
        f"kept {mine}: edited since it was built (--force rewrites it from {CHAPTERS[3].name})"]
    course_build.build(tmp_path, force=True)
    assert "my answer" not in mine.read_text()


def test_an_executed_chapter_is_run_again_in_another_mode_or_on_another_thread_count(tmp_path):
    """``make docs`` reuses the notebooks the test suite executed only where they would be the same: the
    suite's workers run on one thread, and the site's timings should not be theirs."""
    import json

    from minibass.course import execute

    source, out = tmp_path / "00_chapter.py", tmp_path / "00_chapter.ipynb"
    source.write_text("# %%\nprint(1)\n")

    def executed(**recorded):
        out.write_text(json.dumps({"metadata": {"minibass": recorded}}))
        os.utime(out, (source.stat().st_mtime + 1,) * 2)

    threads = torch.get_num_threads()
    executed(fast=execute.FAST, threads=threads)
    assert execute.up_to_date(source, out)
    executed(fast=not execute.FAST, threads=threads)
    assert not execute.up_to_date(source, out)
    executed(fast=execute.FAST, threads=threads + 1)
    assert not execute.up_to_date(source, out)
    executed(fast=execute.FAST)  # executed before the thread count was recorded
    assert not execute.up_to_date(source, out)
    executed(fast=execute.FAST, threads=threads)
    os.utime(source, (out.stat().st_mtime + 1,) * 2)  # the source edited since
    assert not execute.up_to_date(source, out)


def test_stub_keeps_the_indentation_and_rejects_broken_markers():
    text = "def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    assert course_build.stub(text) == f"def f(x):\n    {course_build.STUB}\n"
    for broken in ("# BEGIN SOLUTION\nx = 1\n", "x = 1\n# END SOLUTION\n"):
        with pytest.raises(ValueError):
            course_build.stub(broken)


# ---- every check fails on the stub and on a planted wrong answer --------------------------------------------

def _namespace(chapter_prefix: str, stubbed: bool) -> dict:
    chapter = next(p for p in CHAPTERS if p.stem.startswith(chapter_prefix))
    namespace: dict = {}
    for cell in course_build.exercise_cells(chapter):
        exec(compile(course_build.stub(cell) if stubbed else cell, str(chapter), "exec"), namespace)
    return namespace


def _planted_roofline():
    ns = _namespace("01", stubbed=False)
    return dict(roofline_time=lambda f, b, peak, bw: f / peak + b / bw, critical_batch=ns["critical_batch"])


def _planted_positions():
    return dict(positions_fn=lambda q_lens, lengths: torch.cat([torch.arange(int(q)) for q in q_lens]))


def _planted_accept():
    return dict(accept_probability=lambda p, q, x: min(1.0, float(p[x] / q[x])),
                residual=lambda p, q: (p - q).clamp(min=0))  # not normalised


def test_the_acceptance_check_wants_a_probability():
    """p/q without min(1, .) enumerates to p exactly (the negative rejected mass cancels): caught by its range."""
    ns = _namespace("03", stubbed=False)
    report = checks.check_accept_resample(lambda p, q, x: float(p[x] / q[x]), ns["residual"], quiet=True)
    assert not report.passed and report.rows[0]["got"].endswith("not in [0, 1]")
    assert "min(1, p(x) / q(x))" in str(report)


def test_a_failing_step_gets_the_learners_line_and_a_hint():
    import dataclasses

    from minibass.speculative import step

    def no_rollback(*args):
        *head, phases, timer = args
        return step(*head, dataclasses.replace(phases, rollback=lambda *a: None), timer)

    def returns_nothing(*args):
        step(*args)

    error = checks.check_step(no_rollback, quiet=True).error
    assert "cache capacity" in error and "called from your line" in error and "no_rollback" in error
    assert error.endswith("hint: did your step roll both caches back (phase 5) after emitting?")
    error = checks.check_step(returns_nothing, quiet=True).error
    assert error.startswith("TypeError") and error.endswith("hint: your step must return n, long [B]: the drafts "
                                                            "each sequence accepted")


def test_library_frames_are_not_taken_for_the_learners():
    import statistics

    assert not checks._learners(torch.__file__) and not checks._learners(statistics.__file__)
    assert not checks._learners("/usr/lib/python3/dist-packages/torch/utils/_contextlib.py")  # Debian, Colab
    assert not checks._learners(checks.__file__) and not checks._learners("<frozen runpy>")
    assert checks._learners("/tmp/ipykernel_4242/2764.py") and checks._learners("<ipython-input-3-5f2a>")


def test_the_policy_check_wants_what_makes_a_policy():
    from minibass.draft_length import FixedDraftLength

    error = checks.check_policy(FixedDraftLength(2), quiet=True).error
    assert error.startswith("got a policy object (FixedDraftLength); pass what makes one")
    assert checks.check_policy(lambda: FixedDraftLength(2), quiet=True).error is None


def _planted_is_exact():
    from minibass.oracle.sampler import draft_rows, events, exact_events, setups

    def only_impossible_events(sampler):  # misses bugs that only shift frequencies (reused_uniform)
        g = torch.Generator().manual_seed(0)
        for p, q in setups().values():
            tokens, qs, ps = draft_rows(p, q, 5000, g)
            exact = exact_events(p, q)
            if any(exact.get(e, 0) == 0 for e in events(tokens, *sampler(tokens, qs, ps, generator=g))):
                return False
        return True
    return dict(is_exact=only_impossible_events)


def _planted_kept():
    return dict(kept_lengths=lambda target_len, k, n: (target_len + 1 + n, target_len + 1 + n))  # draft: forgets n = k


def _planted_padded():
    from minibass.oracle.known_bugs import causal_off_by_one

    return dict(attention_fn=causal_off_by_one)


def _planted_online():
    def no_rescale(m_i, l_i, acc, scores, v):
        m_new = torch.maximum(m_i, scores.max(1).values)
        p = torch.exp(scores - m_new[:, None])
        return m_new, l_i + p.sum(1), acc + p @ v
    return dict(step_fn=no_rescale)


def _assembled_step(rollback_first: bool = False, returns: str = "n", q_from_p: bool = False):
    """minibass's step assembled from its phases, with a learner's slip: the roll-back before the history grew,
    the next tokens y returned where the loop wants n, or the target's probabilities passed where the draft's go
    (greedy decoding never reads q, so its tokens are the same; sampling then accepts every draft)."""
    from minibass.speculative import emit

    def step(s, target, draft, draft_lens, sampling, streams, attention, eos_token_id, phases, timer):
        with timer("draft"):
            drafts, q = phases.draft(draft, s.draft_cache, s.history, s.seq_lens, draft_lens, sampling, streams,
                                     attention)
        with timer("verify"):
            p = phases.verify(target, s.target_cache, s.history, s.seq_lens, drafts, draft_lens, s.active, sampling,
                              attention)
        with timer("accept"):
            n, y = phases.accept(drafts, p[:, :drafts.shape[1]] if q_from_p else q, p, draft_lens, s.active, streams)
        with timer("rollback"):
            if rollback_first:
                phases.rollback(s.target_cache, s.draft_cache, s.seq_lens)  # before the history grew
            emit(s, drafts, n, y, eos_token_id)
            if not rollback_first:
                phases.rollback(s.target_cache, s.draft_cache, s.seq_lens)
        return n if returns == "n" else y
    return step


def _planted_step():
    return dict(step_fn=_assembled_step(rollback_first=True))


def _planted_policy():
    from minibass.draft_length import FixedDraftLength

    return dict(make_policy=lambda: FixedDraftLength(8))  # exact, but too long for these costs


# One recorded calibration of chapter 10 (2-core CPU, demo pair, batch 1, k = 4): inputs of the exercise.
RECORDED_RUN = {"regular": 0.0084, "verify": 0.00961, "draft": 0.00131, "k": 4, "batch": 1, "alpha": 0.34705,
                "tokens_per_second": 120.9}


def _planted_predict():
    return dict(predict=lambda regular, verify, draft, k, alpha, batch: batch * (k + 1) / (verify + k * draft))


def _planted_adapter():
    ns = _namespace("11", stubbed=False)

    def off_by_one(foreign):
        inner = ns["wrap"](foreign)

        def sampler(*args, **kwargs):
            n, y = inner(*args, **kwargs)
            return (n + 1).clamp(max=args[0].shape[1]), y
        return sampler
    return dict(wrap=off_by_one)


EXERCISES = {  # chapter -> (check, the names it takes from the chapter's exercise cells, planted answer, kwargs)
    "01": (checks.check_roofline, ("roofline_time", "critical_batch"), _planted_roofline, {}),
    "02": (checks.check_positions, ("positions_of",), _planted_positions, {}),
    "03": (checks.check_accept_resample, ("accept_probability", "residual"), _planted_accept, {}),
    "04": (checks.check_is_exact, ("is_exact",), _planted_is_exact, {}),
    "05": (checks.check_kept_lengths, ("kept_lengths",), _planted_kept, {}),
    "06": (checks.check_padded_attention, ("padded_attention",), _planted_padded, {"cases": 21}),
    "07": (checks.check_online_softmax, ("online_softmax_step",), _planted_online, {}),
    "08": (checks.check_step, ("my_step",), _planted_step, {}),
    "09": (checks.check_policy, ("MyPolicy",), _planted_policy, {}),
    "10": (checks.check_prediction, ("predict",), _planted_predict, {"run": RECORDED_RUN}),
    "11": (checks.check_adapter, ("wrap",), _planted_adapter, {}),
}


def test_every_exercise_chapter_has_a_check_here():
    with_exercises = {p.stem[:2] for p in CHAPTERS if course_build.exercise_cells(p)}
    assert with_exercises == set(EXERCISES)


@pytest.mark.parametrize("prefix", sorted(EXERCISES))
def test_check_fails_on_the_stub(prefix):
    check, names, _, kwargs = EXERCISES[prefix]
    ns = _namespace(prefix, stubbed=True)
    report = check(*(ns[n] for n in names), quiet=True, **kwargs)
    assert not report.passed
    assert str(report).startswith("Failed:") and "not written yet" in str(report)


def test_chapter_04_check_needs_a_test_not_the_name_of_the_right_answer():
    from minibass.rejection import rejection_sample

    report = checks.check_is_exact(lambda sampler: sampler is rejection_sample, quiet=True)
    assert not report.passed and "known_bugs.textbook" in str(report)


def test_checks_refuse_minibass_own_answers():
    from minibass.attention import BACKENDS
    from minibass.speculative import step

    assert not checks.check_padded_attention(BACKENDS["padded"], quiet=True).passed
    assert not checks.check_step(step, quiet=True).passed
    assert not checks.check_online_softmax(checks.online_softmax_reference, quiet=True).passed



def test_chapter_06_check_fails_a_softmax_without_its_maximum_and_says_so():
    """exp(s) / sum(exp(s)) is right on small scores and overflows on large ones (the oracle's large-score cases)."""
    from minibass.oracle.known_bugs import softmax_without_max

    report = checks.check_padded_attention(softmax_without_max, cases=21, quiet=True)
    assert not report.passed and "exp overflowed? Subtract each row's maximum" in str(report), str(report)
    assert [r["check"] for r in report.rows] == ["float32 on large scores"]  # right on the small scores

    def without_scale(q, k_cache, v_cache, q_lens, kv_lens):  # fails both rows by raising: no overflow hint
        return softmax_without_max(q, k_cache, v_cache, q_lens, kv_lens)

    report = checks.check_padded_attention(without_scale, cases=21, quiet=True)
    assert not report.passed and "exp overflowed" not in str(report), str(report)

    def hidden(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None):  # the overflow's NaN made 0: finite, wrong
        return softmax_without_max(q, k_cache, v_cache, q_lens, kv_lens, scale=scale).nan_to_num(0.0)

    report = checks.check_padded_attention(hidden, cases=21, quiet=True)
    assert not report.passed and "exp overflowed? Subtract each row's maximum" in str(report), str(report)

    from minibass.oracle.known_bugs import causal_off_by_one  # wrong on every score: no overflow hint

    report = checks.check_padded_attention(causal_off_by_one, cases=21, quiet=True)
    assert not report.passed and "exp overflowed" not in str(report) and "small scores too" in str(report), str(report)


def test_chapter_08_check_wants_every_phase_timed():
    from minibass.speculative import step

    def untimed_rollback(*args):  # minibass's own step, with its roll-back left out of the timings
        *rest, timer = args
        return step(*rest, lambda phase: contextlib.nullcontext() if phase == "rollback" else timer(phase))

    report = checks.check_step(untimed_rollback, quiet=True)
    assert not report.passed and "missing rollback" in str(report)

    def raises_its_own_key_error(*args):
        raise KeyError("oops")

    report = checks.check_step(raises_its_own_key_error, quiet=True)  # shown as raised, not as a missing timer
    assert not report.passed and "oops" in str(report) and "timer" not in str(report)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_chapter_09_check_fails_a_fixed_length_even_the_best_one_of_either_draft(k):
    class Fixed:
        def lengths(self, active):
            return [k] * len(active)

        def update(self, active, proposed, accepted):
            pass

    report = checks.check_policy(Fixed, quiet=True)
    assert not report.passed and "cost per token" in str(report)


@pytest.mark.parametrize("prefix", sorted(EXERCISES))
def test_check_fails_on_a_planted_wrong_answer(prefix):
    check, names, planted, kwargs = EXERCISES[prefix]
    answer = planted()
    report = check(*(answer[n] for n in answer), quiet=True, **kwargs)
    assert not report.passed, str(report)
    assert str(report).startswith("Failed:")
    if prefix == "11":  # the right sampler failed: the hint says how to see the whole verdict
        assert "print(oracle.check_sampler(wrap(foreign_sampler)))" in str(report)


def _running_max_ignored(m_i, l_i, acc, scores, v):
    m_new = scores.max(1).values  # the block's maximum, not the running one
    alpha = torch.exp(m_i - m_new)
    p = torch.exp(scores - m_new[:, None])
    return m_new, alpha * l_i + p.sum(1), alpha[:, None] * acc + p @ v


def _seeded_by_initial_seed(foreign):
    """An adapter that seeds numpy with the generator's initial seed: every call draws the same numbers."""
    import numpy as np

    def sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
        rng = np.random.default_rng(generator.initial_seed())
        outs = [foreign(draft_tokens[b].tolist(), draft_probs[b].numpy(), target_probs[b].numpy(), rng)
                for b in range(len(draft_tokens))]
        return torch.tensor([len(o) - 1 for o in outs]), torch.tensor([o[-1] for o in outs])
    return sampler


def _no_clamp_residual(p, q):
    return (p - q) / (p - q).sum()  # negative entries: not a distribution


@pytest.mark.parametrize("check, args, kwargs, says", [
    (checks.check_prediction, (lambda regular, verify, draft, k, alpha, batch:
                               batch * expected_tokens(alpha, k - 1) / (verify + k * draft),),
     {"run": RECORDED_RUN}, "cost model"),
    (checks.check_prediction, (lambda regular, verify, draft, k, alpha, batch:
                               batch * expected_tokens(alpha, k) / (verify + (k + 1) * draft),),
     {"run": RECORDED_RUN}, "cost model"),
    (checks.check_step, (_assembled_step(returns="y"),), {}, "what your step returns"),
    (checks.check_step, (_assembled_step(rollback_first=True),), {}, "then emit (the sequences grow, seq_lens with "
                                                                     "them), then rollback"),
    (checks.check_online_softmax, (_running_max_ignored,), {}, "nan"),
    (checks.check_adapter, (_seeded_by_initial_seed,), {"rows": 2_000}, "two calls with one generator"),
    (checks.check_accept_resample, (lambda p, q, x: min(1.0, float(p[x] / q[x])), _no_clamp_residual), {}, "enumeration"),
], ids=["ch10 one accepted token short", "ch10 one draft call too many", "ch08 returns y", "ch08 rollback before emit",
         "ch07 block maximum only",
        "ch11 the same numbers every call", "ch03 residual without max(0, .)"])
def test_checks_fail_the_wrong_answers_learners_write_and_say_where(check, args, kwargs, says):
    report = check(*args, quiet=True, **kwargs)
    assert not report.passed and report.error is None and says in str(report), str(report)


def test_a_return_value_the_check_cannot_read_is_named_with_what_was_expected():
    """Not a TypeError from inside the check's own code: the call, what it returned, what the exercise asks for."""
    from minibass import costmodel

    for report, says in [
        (checks.check_roofline(lambda f, b, p, w: (f / p, b / w), costmodel.critical_batch, quiet=True),
         "roofline_time(flops, bytes, peak, bandwidth) returned (0."),
        (checks.check_roofline(lambda f, b, p, w: max(f / p, b / w),
                               lambda shape, hw: costmodel.critical_batch(shape, hw) + 0.9, quiet=True),
         "is not a whole number"),
        (checks.check_kept_lengths(lambda target_len, k, n: None, quiet=True), "kept_lengths(0, 1, 0) returned None"),
        (checks.check_accept_resample(lambda p, q, x: (p / q).clamp(max=1), lambda p, q: p, quiet=True),
         "accept_probability(p, q, 0) returned tensor(["),
        (checks.check_prediction(lambda *args: None, RECORDED_RUN, quiet=True), "predict(...) returned None")]:
        assert not report.passed and says in report.error and "checks.py" not in report.error, report.error


def test_chapter_10_reference_passes_on_the_recorded_run():
    """The chapter runs its check against a live run; here the same check on a recorded one, deterministically."""
    ns = _namespace("10", stubbed=False)
    assert checks.check_prediction(ns["predict"], RECORDED_RUN, quiet=True).passed


def test_report_table_lists_what_differed():
    report = checks.check_kept_lengths(lambda t, k, n: (0, 0), quiet=True)
    text = str(report)
    assert text.startswith("Failed:") and "expected" in text and "got" in text and "... and" in text


def test_recorded_gpu_results_are_described_with_their_provenance(tmp_path):
    """Chapter 10 shows bench_results/*-cuda.json when there is one; the CPU file has the same layout."""
    from minibass.course import ROOT, describe_gpu_results, gpu_results

    assert gpu_results(tmp_path) == {}
    (tmp_path / "speculative-cuda.json").write_text((ROOT / "bench_results" / "speculative-cpu.json").read_text())
    text = describe_gpu_results(gpu_results(tmp_path))
    assert text.startswith("speculative-cuda:") and "torch" in text and "batch   1" in text and "x (" in text
    for name in ("attention", "decode"):
        (tmp_path / f"{name}-cuda.json").write_text((ROOT / "bench_results" / f"{name}-cpu.json").read_text())
    text = describe_gpu_results(gpu_results(tmp_path))
    assert "padded" in text and "ragged" in text and "ms per call" in text  # attention, per backend
    assert "transformers" in text and "default backend" in text  # decode
