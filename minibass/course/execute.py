"""Runs a chapter source as a script, cell after cell, and keeps what each cell printed and drew.

    MINIBASS_COURSE_FAST=1 python -m minibass.course execute [CHAPTER.py ...] [--out docs/course]

This is plain Python, not a Jupyter kernel: the cells of the percent-format source are executed
in order, in one namespace per chapter, as ``python NN_name.py`` would run them (a shell magic
would be a syntax error). What a cell prints becomes its stream output and every
matplotlib figure it leaves open becomes a PNG output, so the result is a notebook with outputs,
which the documentation site renders (mkdocs-jupyter) with the chapter's plots. A chapter whose
notebook is newer than its source (and made in the same mode, on as many threads) is not run again.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import sys
import traceback
import warnings
from pathlib import Path

import torch

from . import FAST
from .build import CHAPTERS, chapters


class ChapterError(RuntimeError):
    """A cell of a chapter raised: the message names the chapter, the cell and the exception."""


def execute(source: Path, out: Path | None = None):
    """Runs ``source`` cell by cell (cwd: its folder) and returns the notebook with outputs; writes it to ``out``.

    Figures open before it starts are closed first: a chapter starts as in a fresh kernel, and a figure
    left open by the caller would otherwise show as the first cell's plot (or take the chapter's drawing)."""
    import jupytext
    import matplotlib

    matplotlib.use("Agg")  # figures are captured, never shown in a window
    import matplotlib.pyplot as plt
    import nbformat

    source = Path(source).resolve()
    plt.close("all")
    threads = torch.get_num_threads()  # recorded with the outputs: timings depend on it (``up_to_date``)
    notebook = jupytext.reads(source.read_text(), fmt="py:percent")
    namespace = {"__name__": "__main__", "__file__": str(source)}
    cwd = os.getcwd()
    os.chdir(source.parent)
    sys.path.insert(0, str(source.parent))
    try:
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            stdout = io.StringIO()
            try:
                with contextlib.redirect_stdout(stdout), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*non-interactive.*")  # plt.show() under Agg
                    exec(compile(cell.source, f"{source.name}, cell {index}", "exec"), namespace)
            except Exception as error:
                raise ChapterError(f"{source.name}, cell {index}: {type(error).__name__}: {error}\n"
                                   f"{traceback.format_exc()}\n--- output ---\n{stdout.getvalue()[-2000:]}") from error
            outputs = []
            if stdout.getvalue():
                outputs.append(nbformat.v4.new_output("stream", name="stdout", text=stdout.getvalue()))
            for number in plt.get_fignums():
                png = io.BytesIO()
                plt.figure(number).savefig(png, format="png", dpi=90, bbox_inches="tight")
                outputs.append(nbformat.v4.new_output("display_data",
                                                      data={"image/png": base64.b64encode(png.getvalue()).decode()}))
            plt.close("all")
            cell.outputs, cell.execution_count = outputs, index
    finally:
        os.chdir(cwd)
        sys.path.remove(str(source.parent))
    notebook.metadata["minibass"] = {"fast": FAST, "threads": threads}
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, out)
    return notebook


def up_to_date(source: Path, out: Path) -> bool:
    """Whether ``out`` was executed from this ``source``, in this mode (FAST or not) and on as many threads as
    PyTorch has here (the test suite's workers run on one: their timings are not the site's)."""
    import json

    if not out.exists() or out.stat().st_mtime < source.stat().st_mtime:
        return False
    recorded = json.loads(out.read_text()).get("metadata", {}).get("minibass", {})
    return recorded.get("fast") == FAST and recorded.get("threads") == torch.get_num_threads()


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m minibass.course execute", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", type=Path, help="chapter sources (default: all of tutorial/)")
    parser.add_argument("--out", type=Path, default=CHAPTERS.parent / "docs" / "course")
    args = parser.parse_args(argv)
    for source in args.chapters or chapters():
        target = args.out / (source.stem + ".ipynb")
        if up_to_date(source, target):
            print(f"up to date: {target}")
            continue
        execute(source, target)
        print(f"wrote {target}", flush=True)
    return 0
