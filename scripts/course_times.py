"""Times every chapter of the course as a script, in the learner's mode and in the tests' mode,
and prints the chapter table of tutorial/README.md (question, file, exercise, times).

    python scripts/course_times.py [--write]

The question and the file come from each chapter's title and its "File(s):" line, the exercise
from the name of the check it calls; ``--write`` puts the table into tutorial/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from minibass.course import checks
from minibass.course.build import CHAPTERS, chapters

MARK = re.compile(r"^\| # \| question .*?\n\|---.*?\n(?:\|.*\n)*", re.M)


def describe(path: Path) -> tuple[str, str, str]:
    text = path.read_text()
    question = re.search(r"^# # \d\d · (.+)$", text, re.M).group(1)
    files = re.search(r"^# Files?: (.+)$", text, re.M)
    first_file = re.search(r"`([^`]+)`", files.group(1)).group(1) if files else "—"
    check = re.search(r"from minibass.course.checks import (check_\w+)", text)
    exercise = "—"
    if check:  # the name its @_check decorator gives the check
        before = Path(checks.__file__).read_text().split(f"def {check.group(1)}(")[0]
        exercise = re.search(r'_check\("(.+?)"\)', before.rsplit("@", 1)[1]).group(1)
    return question, first_file, exercise


def seconds(path: Path, fast: bool) -> float:
    env = {**os.environ, "MPLBACKEND": "Agg", "MINIBASS_COURSE_FAST": "1" if fast else "0"}
    start = time.perf_counter()
    subprocess.run([sys.executable, path.name], cwd=path.parent, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the table in tutorial/README.md")
    args = parser.parse_args(argv)
    lines = ["| # | question | file it explains | exercise (checked by a cell) | time, learner / test mode |",
             "|---|---|---|---|---|"]
    for path in chapters():
        question, first_file, exercise = describe(path)
        learner, test = seconds(path, fast=False), seconds(path, fast=True)
        lines.append(f"| {path.stem[:2]} | {question} | `{first_file}` | {exercise} | {learner:.0f} s / {test:.0f} s |")
        print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    if args.write:
        readme = CHAPTERS / "README.md"
        text = readme.read_text()
        readme.write_text(MARK.sub(table, text, count=1) if MARK.search(text) else text.replace("TIMES_TABLE\n", table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
