"""python -m minibass.course build [OUT] [--solutions] [--force] | execute [CHAPTER.py ...] [--out DIR]

build: the learner notebooks (default tutorial/notebooks), exercise solutions replaced by stubs;
       a notebook you have edited is kept (--force rewrites it).
execute: run chapters as scripts and keep their outputs and plots as notebooks (default docs/course).
"""

import argparse
import sys

from . import ROOT
from .build import build


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["execute"]:
        from .execute import main as execute_main

        return execute_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m minibass.course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the learner notebooks (exercise solutions replaced by stubs)")
    b.add_argument("out", nargs="?", default=str(ROOT / "tutorial" / "notebooks"))
    b.add_argument("--solutions", action="store_true", help="keep the reference solutions (for teachers)")
    b.add_argument("--force", action="store_true",
                   help="rewrite every notebook, also those you have edited (your answers in them are lost)")
    sub.add_parser("execute", help="run chapters as scripts, keep outputs and plots as notebooks (docs)")
    args = parser.parse_args(argv)
    build(args.out, solutions=args.solutions, force=args.force, report=print)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
