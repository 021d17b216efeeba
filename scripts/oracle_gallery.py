"""Runs every sampler of ``oracle.known_bugs`` through ``check_sampler`` and prints a markdown table.

    python scripts/oracle_gallery.py [--rows 200000]

For each bug: how many of the verdict's checks failed, how many rows emitted an impossible event
(summed over the setups), and the G-test over possible events that failed by the widest margin (docs/oracle.md quotes this table).
"""

from __future__ import annotations

import argparse

from minibass import oracle
from minibass.oracle import known_bugs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args(argv)
    if args.rows < 100:  # check_sampler's own floor, said before the table's header
        raise ValueError(f"--rows must be >= 100, got {args.rows}")
    print("| bug | checks failed | rows with impossible events | strongest G-test failure | G | threshold |\n"
          "|---|---|---|---|---|---|")
    for name, fn in known_bugs.SAMPLERS.items():
        verdict = oracle.check_sampler(fn, rows=args.rows, name=name)
        failed = verdict.failures()
        impossible = sum(int(c.statistic) for c in verdict.checks if "impossible" in c.name)
        g_tests = [c for c in failed if "G-test" in c.name or "marginal" in c.name or "length" in c.name]
        worst = max(g_tests, key=lambda c: c.statistic / c.threshold) if g_tests else None
        cells = f"{worst.name} | {worst.statistic:.4g} | {worst.threshold:.4g}" if worst else "- | - | -"
        print(f"| `{name}` | {len(failed)} of {len(verdict.checks)} | {impossible:,} | {cells} |", flush=True)

if __name__ == "__main__":
    from minibass.bench.common import run_script

    run_script(main)
