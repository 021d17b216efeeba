"""The answer every oracle check gives: a list of measured checks and whether all passed."""

from __future__ import annotations

import json
import math
import site
import sysconfig
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Check:
    """One row of a verdict.

    name: what was checked ("[temperature] joint G-test"); measured: what was measured, in
    words; statistic and threshold: numbers with the rule ``passed = statistic <= threshold``
    unless ``rule`` says otherwise; detail: the failing case or the evidence, in words.
    """

    name: str
    measured: str
    statistic: float
    threshold: float
    passed: bool
    rule: str = "<="
    detail: str = ""


@dataclass
class Verdict:
    """What an oracle check found. ``ok`` is True only if every check passed.

    subject: what was checked ("sampler minibass"); checks: the rows (``Check``); notes: what the rows
    rest on (sizes, tolerances, test levels) and what a setting cannot see; seconds: how long the check
    ran. ``str(verdict)`` is the table a person reads; ``to_dict()`` the same as JSON.
    """

    subject: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def add(self, name: str, measured: str, statistic: float, threshold: float, passed: bool | None = None,
            rule: str = "<=", detail: str = "") -> Check:
        if passed is None:
            passed = statistic <= threshold if rule == "<=" else statistic >= threshold
        check = Check(name, measured, float(statistic), float(threshold), bool(passed), rule, detail)
        self.checks.append(check)
        return check

    def add_g_test(self, name: str, test, level: float, what: str = "", detail: str = "") -> Check:
        """A row for a ``stats.GTest``: its statistic against the critical value at false-alarm rate ``level``."""
        from .stats import critical_value

        return self.add(name, f"{what}G over {test.dof + 1} cells, p = {test.pvalue:.3g}", test.statistic,
                        critical_value(test.dof, level), detail=detail)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict:
        """The verdict as plain data. A statistic that is not finite (inf: the code under test raised or
        returned something malformed, as the row's detail says) is written as None, JSON's null."""
        def clean(x):  # JSON has no infinity: a statistic that is not finite (the call failed) becomes null
            return x if not isinstance(x, float) or math.isfinite(x) else None

        return {"subject": self.subject, "ok": self.ok, "seconds": round(self.seconds, 3), "notes": self.notes,
                "checks": [{k: clean(v) for k, v in asdict(c).items()} for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        head = f"{self.subject}: {'PASS' if self.ok else 'FAIL'} ({len(self.failures())} of {len(self.checks)} " \
               f"checks failed, {self.seconds:.1f} s)"
        width = max([len(c.name) for c in self.checks] + [5])
        lines = [head, f"  {'check':<{width}}  {'statistic':>12}  {'rule':>4}  {'threshold':>12}  result"]
        for c in self.checks:
            lines.append(f"  {c.name:<{width}}  {_num(c.statistic):>12}  {c.rule:>4}  {_num(c.threshold):>12}  "
                         f"{'pass' if c.passed else 'FAIL'}  {c.measured}")
        for c in self.failures():
            if c.detail:
                lines.append(f"  failing case [{c.name}]: {c.detail}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def raise_for_failure(self) -> None:
        """Raise ``AssertionError(str(self))`` unless ``ok``: a failing check fails a pytest test with the table."""
        if not self.ok:
            raise AssertionError(str(self))


def raised(error: BaseException) -> str:
    """An exception of the code under test in words, with where it was raised: the innermost frame of the
    caller's own code (not minibass's, not an installed library's), else the innermost frame. Call it in
    the function whose ``try`` called the code under test: that frame, the first, is left out."""
    frames = traceback.extract_tb(error.__traceback__)[1:]
    own = [f for f in frames if not is_library(f.filename)]
    where = (own or frames)[-1] if frames else None
    if not own and where is not None and where.name == "_call" and Path(where.filename).resolve().is_relative_to(_ORACLE):
        where = None  # nothing ran below the oracle's own ``_call``, which called the code under test: the call failed
    at = f" (at {where.filename}:{where.lineno} in {where.name})" if where else " (by the call itself: its signature?)"
    return f"raised {type(error).__name__}: {error}{at}"


_ORACLE = Path(__file__).resolve().parent
# minibass itself, the standard library and the site directories: frames there are not the caller's code.
_LIBRARIES = {Path(__file__).resolve().parents[1]} | {Path(p).resolve() for p in [
    *site.getsitepackages(), site.getusersitepackages(),
    *(sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib"))]}


def is_library(filename: str) -> bool:
    """Whether a traceback frame's file is minibass's, the standard library's or an installed package's (also
    in any site-packages or dist-packages folder, where Debian's Python and Colab keep them), rather than
    the code of whoever called minibass: an engine under the oracle, a learner in the course."""
    if filename.startswith("<"):  # code without a file: "<frozen runpy>" is Python's; "<string>", "<ipython-input-…>"
        return filename.startswith("<frozen")
    path = Path(filename).resolve()
    return any(path.is_relative_to(library) for library in _LIBRARIES) or \
        bool({"site-packages", "dist-packages"} & set(path.parts))


def _num(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == int(x) and abs(x) < 1e9:  # a count: every digit
        return f"{int(x)}"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.3e}"
