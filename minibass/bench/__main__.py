"""python -m minibass.bench <name> [options]; ``--help`` after a name lists its options."""

import importlib
import sys

BENCHMARKS = {"decode": "minibass.bench.decode", "attention": "minibass.bench.attention", "peers": "minibass.bench.peers",
              "speculative": "minibass.bench.speculative", "policies": "minibass.bench.policies"}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python -m minibass.bench {{{','.join(BENCHMARKS)}}} [options]", file=sys.stderr)
        sys.exit(2)
    importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()
