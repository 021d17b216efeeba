"""How often a correct sampler fails the oracle's G-test, with and without Williams' correction.

    python scripts/g_test_false_alarms.py [--rows 2000] [--runs 4000000]

Draws ``--runs`` multinomial samples of ``--rows`` events from the exact event law of the sampler
check's ``top_k`` setup (what a correct sampler's emitted events follow), pools the cells as
``minibass.oracle.stats.g_test`` does, and prints, at levels 1e-3, 1e-4 and 1e-5, the share of runs
whose G exceeds the chi-square critical value: uncorrected, and divided by Williams' factor (vectorised
here; ``g_test`` computes the same statistic for one sample).
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from minibass.oracle.sampler import exact_events, setups
from minibass.oracle.stats import MIN_EXPECTED


def pooled(expected: np.ndarray) -> tuple[np.ndarray, np.ndarray, int | None]:
    """``g_test``'s pooling: (kept cells mask, pooled expectations, index the small pooled cell merges into)."""
    big = expected >= MIN_EXPECTED
    cells = np.append(expected[big], expected[~big].sum())
    merge = int(np.argmin(cells[:-1])) if 0 < cells[-1] < MIN_EXPECTED and big.sum() > 1 else None
    if merge is not None:
        cells[merge] += cells[-1]
        cells = cells[:-1]
    elif cells[-1] == 0:  # no small cell, so no pooled cell (g_test drops cells that expect 0)
        cells = cells[:-1]
    return big, cells, merge


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=4_000_000)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args(argv)
    p, q = setups()["top_k"]
    law = np.array(list(exact_events(p, q).values()))
    law /= law.sum()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    big, cells, merge = pooled(law * args.rows)
    dof = len(cells) - 1
    if dof < 1:  # g_test passes such a sample whatever it holds: there is no false alarm to count
        parser.error(f"--rows {args.rows}: fewer than 2 cells after pooling, nothing to test")
    williams = 1 + ((args.rows / cells).sum() - 1) / (6 * args.rows * dof)
    rng, g = np.random.default_rng(args.seed), []
    for start in range(0, args.runs, 200_000):
        counts = rng.multinomial(args.rows, law, size=min(200_000, args.runs - start)).astype(float)
        counts = np.concatenate([counts[:, big], counts[:, ~big].sum(1, keepdims=True)], 1)
        if merge is not None:
            counts[:, merge] += counts[:, -1]
        counts = counts[:, :len(cells)]  # the pooled column dropped where it merged or is empty
        with np.errstate(divide="ignore", invalid="ignore"):
            g.append(2 * np.where(counts > 0, counts * np.log(counts / cells), 0).sum(1))
    g = np.concatenate(g)
    print(f"{args.runs:,} runs of {args.rows:,} rows, {dof} degrees of freedom, Williams' factor {williams:.4f}")
    for level in (1e-3, 1e-4, 1e-5):
        critical = stats.chi2.isf(level, dof)
        print(f"level {level:.0e}: failed {np.mean(g > critical):.2e} uncorrected, {np.mean(g / williams > critical):.2e} "
              "corrected")


if __name__ == "__main__":
    main()
