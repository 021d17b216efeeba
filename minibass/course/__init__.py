"""What the course (``tutorial/``) imports besides minibass itself: the mode, the exercise checks'
report, and the recorded GPU results.

``FAST`` is the mode the test suite runs the chapters in (``MINIBASS_COURSE_FAST=1``): smaller
sizes, the same code. ``Report`` is what every exercise check returns and prints: ``Passed``, or
``Failed`` with a small table of what differed. The checks themselves are in ``checks.py``; the
learner notebooks are built by ``build.py`` (``python -m minibass.course build``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

FAST = os.environ.get("MINIBASS_COURSE_FAST") == "1"
ROOT = Path(__file__).resolve().parents[2]  # the checkout (the chapters and bench_results/ live there)


def size(fast, full):
    """``fast`` in the tests' mode, ``full`` for a learner."""
    return fast if FAST else full


@dataclass
class Report:
    """The outcome of an exercise check: passed, or the rows that differed (at most ``limit`` shown)."""

    name: str
    rows: list[dict] = field(default_factory=list)
    error: str | None = None
    cases: int = 0
    limit: int = 6
    hint: str | None = None  # printed under the table of a failed check
    unit: str = "cases"  # what ``cases`` counts

    @property
    def passed(self) -> bool:
        return self.error is None and not self.rows and self.cases > 0

    def __str__(self) -> str:
        if self.passed:
            return f"Passed: {self.name} ({self.cases} {self.unit})"
        if self.error is not None:
            return f"Failed: {self.name}\n  {self.error}"
        if not self.cases:
            return f"Failed: {self.name}\n  no case was checked"
        keys = list(dict.fromkeys(k for r in self.rows[:self.limit] for k in r))  # rows may differ in columns
        # Cells are cut at 60 characters, but for the last column: it says what went wrong, whole.
        shown = [[_fmt(r.get(k, ""), whole=i == len(keys) - 1) for i, k in enumerate(keys)]
                 for r in self.rows[:self.limit]]
        widths = [max(len(k), *(len(row[i]) for row in shown)) for i, k in enumerate(keys)]
        lines = [f"Failed: {self.name} ({len(self.rows)} of {self.cases} {self.unit} differ)",
                 ("  " + "  ".join(k.ljust(w) for k, w in zip(keys, widths))).rstrip(),
                 "  " + "  ".join("-" * w for w in widths)]
        lines += [("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths))).rstrip() for row in shown]
        if len(self.rows) > self.limit:
            lines.append(f"  ... and {len(self.rows) - self.limit} more")
        if self.hint:
            lines.append(f"  {self.hint}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle):  # IPython shows the same table
        printer.text(str(self))


def _fmt(x, whole: bool = False) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    text = str(x)
    return text if whole or len(text) <= 60 else text[:57] + "..."


def gpu_results(folder: Path | None = None) -> dict:
    """The committed GPU benchmark results (``bench_results/*-cuda.json``), by name; {} if none were recorded."""
    folder = folder or ROOT / "bench_results"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*-cuda.json"))} if folder.is_dir() else {}


def describe_gpu_results(results: dict) -> str:
    """The recorded GPU results in a few lines each: provenance, then the numbers to look at.

    speculative: per batch, regular tokens/s and the best speed-up; attention: per batch (at the
    largest new-token count and spread), each backend's time; decode: per batch, tokens/s of
    transformers and of minibass's default backend.
    """
    lines = []
    for name, result in results.items():
        p = result.get("provenance", {})
        lines.append(f"{name}: {p.get('device', '?')}, torch {p.get('torch', '?')}, triton {p.get('triton', '?')}, "
                     f"{p.get('date', '?')}, `{p.get('command', '?')}`")
        rows = result.get("rows", [])
        if name.startswith("speculative"):
            for row in rows:
                best = max(row["runs"], key=lambda r: r["speedup"])
                lines.append(f"  batch {row['batch']:3d}: regular {row['regular_tok_s']:8.0f} tokens/s (padded); best "
                             f"speculative {best['speedup']:.2f}x ({best['backend']}, k = {best['draft_length']})")
            if "incomplete" in result:
                lines.append(f"  incomplete: {result['incomplete']}")
        elif name.startswith("attention") and rows:
            q, spread = max(r["new_tokens"] for r in rows), max(r["spread"] for r in rows)
            lines.append(f"  ms per call, {q} new tokens per sequence, cache lengths spread {spread}:")
            for row in (r for r in rows if r["new_tokens"] == q and r["spread"] == spread):
                lines.append(f"  batch {row['batch']:3d}: " + "  ".join(
                    f"{backend} {entry['ms']:.2f}" for backend, entry in row["backends"].items()))
        elif name.startswith("decode"):
            for row in rows:
                ours = (f", minibass {row['minibass_default_tok_s']:6.0f} tokens/s (default backend, "
                        f"{result.get('default_backend', '?')})" if "minibass_default_tok_s" in row else "")
                lines.append(f"  batch {row['batch']:3d}: transformers {row['transformers_tok_s']:6.0f} tokens/s{ours}")
    return "\n".join(lines)
