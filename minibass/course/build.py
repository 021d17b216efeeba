"""Builds the learner's notebooks from the chapter sources (jupytext percent-format ``.py`` files).

In a chapter source, the reference solution of an exercise sits between two marker lines:

    def kept_lengths(target_len, k, n):
        # BEGIN SOLUTION
        m = target_len + 1
        return m + n, min(m + k - 1, m + n)
        # END SOLUTION

The learner's notebook gets a stub there instead (``raise NotImplementedError(...)``, indented
like the markers), and keeps everything else — the explanations, the measurements and the cell
that checks the exercise. Sources run as plain Python with their solutions (that is how the test
suite runs every chapter); notebooks are generated, never committed with outputs.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import ROOT

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
STUB = 'raise NotImplementedError("your code here")'
CHAPTERS = ROOT / "tutorial"


def chapters(folder: Path = CHAPTERS) -> list[Path]:
    """The chapter sources in order: tutorial/NN_name.py."""
    return sorted(p for p in folder.glob("[0-9][0-9]_*.py"))


def stub(text: str) -> str:
    """The source with every solution block replaced by a stub."""
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ValueError("nested '# BEGIN SOLUTION'")
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + STUB + "\n")
        elif marker == END:
            if not inside:
                raise ValueError("'# END SOLUTION' without '# BEGIN SOLUTION'")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("'# BEGIN SOLUTION' without '# END SOLUTION'")
    return "".join(out)


def cells(text: str) -> list[str]:
    """The code cells of a percent-format source (markdown cells left out)."""
    parts = re.split(r"^# %%(.*)$", text, flags=re.M)
    return [body for header, body in zip(parts[1::2], parts[2::2]) if "[markdown]" not in header]


def exercise_cells(path: Path) -> list[str]:
    """The code cells of a chapter that hold a solution (with the solution), in order."""
    return [c for c in cells(Path(path).read_text()) if BEGIN in c]


def _cells_digest(notebook) -> str:
    """A digest of a notebook's cell sources: what a learner edits (outputs and metadata left out)."""
    import hashlib

    text = "\0".join(f"{cell.cell_type}\0{cell.source}" for cell in notebook.cells)
    return hashlib.sha256(text.encode()).hexdigest()


def edited(path: Path) -> bool:
    """Whether the notebook at ``path`` was changed since ``build`` wrote it: its cells no longer match
    the digest ``build`` stored in its metadata (running cells only adds outputs, which do not count)."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    return notebook.metadata.get("minibass", {}).get("cells_sha256") != _cells_digest(notebook)


def build(out: Path, folder: Path = CHAPTERS, solutions: bool = False, force: bool = False,
          report=None) -> list[Path]:
    """Writes one .ipynb per chapter into ``out`` (stubs unless ``solutions``); returns their paths.

    A notebook already in ``out`` that the learner has edited is kept as it is (their answers are in
    it), unless ``force``; one that is unedited is rewritten from its chapter source. ``report``, if
    given, is called with a line for each notebook (written or kept, and why).
    """
    import jupytext

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for source in chapters(folder):
        path = out / (source.stem + ".ipynb")
        if path.exists() and not force and edited(path):
            if report:
                report(f"kept {path}: edited since it was built (--force rewrites it from {source.name})")
            written.append(path)
            continue
        text = source.read_text()
        notebook = jupytext.reads(text if solutions else stub(text), fmt="py:percent")
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        notebook.metadata["minibass"] = {"source": source.name, "cells_sha256": _cells_digest(notebook)}
        jupytext.write(notebook, path, fmt="ipynb")
        if report:
            report(f"wrote {path}")
        written.append(path)
    return written
