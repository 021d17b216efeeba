"""python -m minibass.course build [OUT] [--solutions]: the learner notebooks (default tutorial/notebooks)."""

import argparse

from . import ROOT
from .build import build


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minibass.course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the learner notebooks (exercise solutions replaced by stubs)")
    b.add_argument("out", nargs="?", default=str(ROOT / "tutorial" / "notebooks"))
    b.add_argument("--solutions", action="store_true", help="keep the reference solutions (for teachers)")
    args = parser.parse_args(argv)
    for path in build(args.out, solutions=args.solutions):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
