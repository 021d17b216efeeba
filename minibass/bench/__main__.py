"""python -m minibass.bench <name> [options]; ``--help`` after a name lists its options."""

import importlib
import sys

BENCHMARKS = {"decode": "minibass.bench.decode", "attention": "minibass.bench.attention", "peers": "minibass.bench.peers",
              "speculative": "minibass.bench.speculative", "policies": "minibass.bench.policies"}
WHAT = {"decode": "minibass generate vs transformers generate",
        "attention": "naive vs PAD vs SPLIT vs ragged over ragged batches",
        "speculative": "regular vs speculative decoding, per backend and draft length",
        "peers": "transformers (plain, assisted) vs minibass, demo pair",
        "policies": "draft-length policies on replayed greedy runs, no timing noise"}
USAGE = f"usage: python -m minibass.bench {{{','.join(BENCHMARKS)}}} [options]"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE + "\n\nBenchmarks (reported, never asserted); `--help` after a name lists its options.\n"
              "Results go to bench_results/ (the committed ones) for the documented run, every option but\n"
              "--device at its default, and to build/bench/ otherwise.\n")
        for name, what in WHAT.items():
            print(f"  {name:12s} {what}")
        return
    if not argv or argv[0] not in BENCHMARKS:
        got = f"unknown benchmark {argv[0]!r}" if argv else "no benchmark named"
        print(f"error: {got} ({USAGE}; --help lists them)", file=sys.stderr)
        sys.exit(2)
    from .common import run_script

    # Each checks its options first (one-line errors); what minibass refuses later is said in one line too.
    run_script(lambda: importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:]))


if __name__ == "__main__":
    main()
