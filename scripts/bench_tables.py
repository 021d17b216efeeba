"""Prints the benchmark tables of docs/benchmarks.md (markdown) from the committed JSON in bench_results/.

    python scripts/bench_tables.py [--device cpu]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minibass.bench.common import rate_text

RESULTS = Path(__file__).resolve().parent.parent / "bench_results"


def load(name: str, device: str):
    path = RESULTS / f"{name}-{device}.json"
    return json.loads(path.read_text()) if path.exists() else None


def decode_table(d) -> str:
    backends = [k[len("minibass_"):-len("_tok_s")] for k in d["rows"][0] if k.endswith("_tok_s") and
                k.startswith("minibass_")]
    head = "| batch | transformers `generate` | " + " | ".join(
        f"minibass {b}" + (f" (= {d['default_backend']})" if b == "default" else "") for b in backends) + " |"
    lines = [head, "|" + "---|" * (2 + len(backends))]
    for r in d["rows"]:
        cells = [f"{r[f'minibass_{b}_tok_s']:.0f} tok/s ({r[f'minibass_{b}_ratio']:.2f}x)" for b in backends]
        lines.append(f"| {r['batch']} | {r['transformers_tok_s']:.0f} tok/s | " + " | ".join(cells) + " |")
    default = [r.get("minibass_default_step_ms") for r in d["rows"]]
    if all(default):
        lines.append("")
        lines.append("Per decoding step with the default backend (forward calls + everything else): " + "; ".join(
            f"batch {r['batch']}: {s['forward']:.2f} + {s['other']:.2f} ms" for r, s in zip(d["rows"], default)) + ".")
    return "\n".join(lines)


def attention_table(d, new_tokens: int = 4) -> str:
    rows = [r for r in d["rows"] if r["new_tokens"] == new_tokens]
    names = list(rows[0]["backends"])
    label = {n: n + (" (interpreted)" if "note" in rows[0]["backends"][n] else "") for n in names}
    lines = ["| batch | spread | PAD waste | " + " | ".join(label[n] for n in names) + " |",
             "|" + "---|" * (3 + len(names))]
    for r in rows:
        cells = [f"{r['backends'][n]['ms']:.1f} ms" for n in names]
        lines.append(f"| {r['batch']} | {r['spread']} | {r['backends']['padded']['waste']:.2f}x | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def speculative_table(d, backend: str) -> str:
    ks = list(dict.fromkeys(run["draft_length"] for run in d["rows"][0]["runs"] if run["backend"] == backend))
    lines = ["| batch | regular | " + " | ".join(f"k={k}" for k in ks) + " |", "|" + "---|" * (2 + len(ks))]
    for r in d["rows"]:
        runs = {run["draft_length"]: run for run in r["runs"] if run["backend"] == backend}
        cells = [f"{runs[k]['tok_s']:.0f} tok/s ({runs[k]['speedup']:.2f}x), "
                 f"accept {rate_text(runs[k]['acceptance_rate'])}, "
                 f"{runs[k]['tokens_per_target_call']:.1f} tok/call, {runs[k].get('outside_forward_share', 0):.0%} "
                 f"outside forward" for k in ks]
        lines.append(f"| {r['batch']} | {r['regular_tok_s']:.0f} tok/s | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def peers_table(d) -> str:
    names = ["hf_generate", "hf_assisted", "mb_generate", "mb_speculative"]
    lines = ["| temperature | batch | " + " | ".join(names) + " | greedy outputs identical |", "|" + "---|" * 7]
    for r in d["rows"]:
        same = "-" if "greedy_identical" not in r else ("yes" if all(r["greedy_identical"].values()) else "no")
        cells = [f"{r[f'{n}_tok_s']:.0f} tok/s ({r[f'{n}_vs_hf_generate']:.2f}x)" for n in names]
        lines.append(f"| {r['temperature']} | {r['batch']} | " + " | ".join(cells) + f" | {same} |")
    return "\n".join(lines)


def policies_table(d) -> str:
    names = list(d["rows"][0]["speedup"])
    label = {n: f"k={n}" if n.isdigit() else n for n in names}
    lines = ["| batch | groups | " + " | ".join(label[n] for n in names) + " |", "|" + "---|" * (2 + len(names))]
    for r in d["rows"]:
        best = max((r["speedup"][n] for n in names if n.isdigit()), default=None)
        cells = [f"**{r['speedup'][n]:.2f}x**" if n.isdigit() and r["speedup"][n] == best else f"{r['speedup'][n]:.2f}x"
                 for n in names]
        lines.append(f"| {r['batch']} | {r['groups']} | " + " | ".join(cells) + " |")
    costs = "; ".join(f"batch {b}: regular {c['regular']:.2f} ms, draft {c['draft'] / c['regular']:.2f}, verify of 5 "
                      f"{c['verify5'] / c['regular']:.2f}" for b, c in d["costs_ms"].items())
    return "\n".join(lines) + f"\n\nCall costs (draft and verify in regular steps): {costs}."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="whose files: *-cpu.json or *-cuda.json")
    args = parser.parse_args(argv)
    for name, render in [("decode", decode_table), ("attention", attention_table),
                         ("speculative", lambda d: "\n\n".join(
                             f"Backend `{b}`:\n\n" + speculative_table(d, b)
                             for b in dict.fromkeys(run["backend"] for run in d["rows"][0]["runs"]))),
                         ("peers", peers_table),
                         ("policies", policies_table)]:
        data = load(name, args.device)
        if data:
            p = data["provenance"]
            print(f"### {name} ({p['device']}, torch {p['torch']}, {p['date']})\n\n{render(data)}\n")


if __name__ == "__main__":
    main()
