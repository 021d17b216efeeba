"""Helpers shared by the benchmarks: provenance for the JSON files, timing, tiny random checkpoints."""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from minibass.costmodel import cpu_threads


def rate_text(value) -> str:
    """An acceptance rate for a table: two decimals, or "-" where there is none (plain decoding, or no draft
    token proposed)."""
    return "-" if value is None else f"{value:.2f}"


COMMAND: str | None = None  # the command line of the run in progress, set by ``parse`` (for ``provenance``)
RESULTS, TRIALS = Path("bench_results"), Path("build/bench")
KEPT = {"device"}  # the one option a run may set and still write the committed results


class Parser(argparse.ArgumentParser):
    """A benchmark's options; a usage error is one line on stderr (exit 2), as in ``python -m minibass``."""

    def error(self, message):
        self.exit(2, f"error: {message} (usage: {self.prog} --help)\n")


def run_script(main) -> None:
    """Runs a benchmark's or a script's ``main()`` from the command line: what it refuses (a ``ValueError``, a
    missing file or dependency) is one line on stderr and exit status 2, as ``python -m minibass`` says it. (Called
    directly, ``main`` raises, which is what the tests look for.)"""
    try:
        main()
    except (ValueError, FileNotFoundError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def positive_int(text: str) -> int:
    """An argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def probability(text: str) -> float:
    """An argparse type: a float in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}")
    return value


def parse(parser: argparse.ArgumentParser, argv, name: str) -> argparse.Namespace:
    """Parses a benchmark's options, checks ``--device`` (if it has one) and records the command line."""
    global COMMAND
    args = parser.parse_args(argv)
    for option, value in vars(args).items():  # a value given twice (--backends padded padded) is one cell, not two
        if isinstance(value, list):
            setattr(args, option, list(dict.fromkeys(value)))
    words = sys.argv[1:] if argv is None else [name, *argv]
    COMMAND = shlex.join(["python", "-m", "minibass.bench", *words])
    if hasattr(args, "device"):
        from minibass.loading import _device

        try:
            _device(args.device)
        except ValueError as error:
            parser.error(str(error))
    return args


def result_path(parser: argparse.ArgumentParser, args: argparse.Namespace, stem: str, given: str | None) -> Path:
    """Where a run writes ``stem`` (e.g. ``attention-cpu.json``): ``given`` if set; else the committed
    results, ``bench_results/stem``, for the documented run (every option but ``--device`` at its
    default); else ``build/bench/stem``, so that a trial run (``--quick``, other sizes) never replaces them.
    ``--out`` or ``--plot`` counts as an option too: a run that names one of its files writes the file it
    leaves unnamed under ``build/bench/``."""
    if given:
        path = Path(given)
    else:
        changed = [k for k, v in vars(args).items() if k not in KEPT and v != parser.get_default(k)]
        path = (TRIALS if changed else RESULTS) / stem
    # Said now, before the run, not when the file is written at its end.
    if path.is_dir():
        parser.error(f"{path} is a folder: --out and --plot name files")
    above = next((folder for folder in path.parents if folder.exists()), None)  # the nearest existing folder above
    if above is not None and not above.is_dir():
        parser.error(f"cannot write {path}: {above} is a file, not a folder")
    if above is not None and not os.access(above, os.W_OK):
        parser.error(f"cannot write {path}: {above} is not writable")
    if path.suffix == ".png" and importlib.util.find_spec("matplotlib") is None:
        parser.error(f"the plot {path} needs matplotlib, which this environment lacks: pip install 'minibass[bench]'")
    return path


def provenance(device: str) -> dict:
    """Where and how a result was measured: device, versions, date, the command."""
    import transformers

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.startswith("cuda"):
        device_name = torch.cuda.get_device_name(torch.device(device))
    else:
        device_name = f"{platform.processor() or platform.machine()} CPU, {cpu_threads()}"
    return {
        "device": device_name,
        "cpu": cpu_model(),
        "commit": source_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "transformers": transformers.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": COMMAND or shlex.join(["python", "-m", "minibass.bench", *sys.argv[1:]]),
    }


def cpu_model() -> str | None:
    """The CPU's model name as Linux reports it (None elsewhere): timings on a CPU depend on it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def source_commit() -> str | None:
    """``git describe --always --dirty`` of the checkout minibass runs from (None outside one, or when it runs
    from an installed copy, which a checkout around it would misname): the code measured."""
    import subprocess

    if "site-packages" in Path(__file__).parts:
        return None
    try:
        run = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (run.stdout.strip() or None) if run.returncode == 0 else None


def timed(fn, *, device: str) -> tuple[float, object]:
    """Seconds one call of fn() takes (synchronising the GPU), and its result."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def median_timed(fn, *, device: str, reps: int) -> tuple[float, object]:
    """The median of ``reps`` timed calls of fn() (after the caller's warm-up), and the last result."""
    runs = [timed(fn, device=device) for _ in range(reps)]
    return sorted(r[0] for r in runs)[len(runs) // 2], runs[-1][1]


@contextmanager
def forward_clock(*models, device: str):
    """Adds up the seconds spent inside the models' ``forward`` calls while the block runs.

    Yields a dict whose ``"seconds"`` grows with every call (the GPU synchronised around each
    call, so that the time is the call's own); the models are restored afterwards.
    """
    spent = {"seconds": 0.0}
    models = list(dict.fromkeys(models))  # a model named twice (a target as its own draft) is clocked once

    def clocked(original):
        def forward(*args, **kwargs):
            seconds, result = timed(lambda: original(*args, **kwargs), device=device)
            spent["seconds"] += seconds
            return result
        return forward

    for model in models:
        model.forward = clocked(model.forward)
    try:
        yield spent
    finally:
        for model in models:
            del model.forward  # back to the class's method


def filled_cache(model, batch: int, context: int, capacity: int):
    """A cache of ``capacity`` slots per sequence for ``batch`` sequences, each with ``context`` random
    tokens already in it (one prefill call)."""
    cache = model.init_cache(batch, capacity)
    model.forward(torch.randint(0, model.vocab_size, (batch * context,)), torch.full((batch,), context), cache)
    return cache


def call_ms(model, batch: int, context: int, new: int, *, reps: int = 15, cache=None) -> float:
    """Median milliseconds of one forward call of ``new`` tokens per sequence, for ``batch``
    sequences with ``context`` tokens cached (after warm-up calls; the cache is rolled back each time).

    ``cache``: one from ``filled_cache(model, batch, context, capacity >= context + new)`` to time
    against, so that several timings share one prefill (at batch 32 a prefill takes as long as a dozen
    calls); by default a new one."""
    if cache is None:
        cache = filled_cache(model, batch, context, context + new)
    lengths = cache.lengths
    if len(cache.kv) != model.config.num_hidden_layers:
        raise ValueError(f"call_ms: the cache has {len(cache.kv)} layers, the model {model.config.num_hidden_layers}")
    if lengths.tolist() != [context] * batch or cache.capacity < context + new:
        raise ValueError(f"call_ms: the cache must hold {context} tokens per sequence of {batch} and room for "
                         f"{new} more, got lengths {lengths.tolist()} and capacity {cache.capacity}")
    tokens, q_lens = torch.randint(0, model.vocab_size, (batch * new,)), torch.full((batch,), new)
    times = []
    for _ in range(reps + 3):
        with torch.inference_mode():  # as generate and speculative_generate call it
            start = time.perf_counter()
            model.forward(tokens, q_lens, cache)
            times.append(time.perf_counter() - start)
        cache.truncate(lengths)  # (outside: the cache's lengths stay an ordinary tensor)
    return 1e3 * sorted(times[3:])[reps // 2]


def call_costs(target, draft, batch: int, verify_tokens: int, *, context: int = 48, rounds: int = 3) -> dict:
    """Milliseconds of a regular decode step, one draft call and one verify of ``verify_tokens`` tokens
    per sequence, at ``batch`` sequences over ``context`` cached tokens.

    The three are timed in turn, ``rounds`` times (each a median of 7 calls), against one prefilled
    cache per model. The regular step is the median round's; the other two are that times the median
    of their per-round ratios to the regular step, so that a slow spell of the machine, which lasts
    seconds, cancels out of each ratio.
    """
    target_cache = filled_cache(target, batch, context, context + verify_tokens)
    draft_cache = filled_cache(draft, batch, context, context + 1)
    probes = {"regular": (target, target_cache, 1), "draft": (draft, draft_cache, 1),
              "verify": (target, target_cache, verify_tokens)}
    times = {name: [] for name in probes}
    for _ in range(rounds):
        for name, (model, cache, new) in probes.items():
            times[name].append(call_ms(model, batch, context, new, reps=7, cache=cache))
    regular = statistics.median(times["regular"])
    return {"regular": regular, **{name: regular * statistics.median(t / r for t, r in zip(times[name], times["regular"]))
                                   for name in ("draft", "verify")}}


def write_json(path: str | Path, payload: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    if path.parent.resolve() == RESULTS.resolve() and path not in _ANNOUNCED:
        _ANNOUNCED.add(path)
        print(f"(writing the committed results {path}: `git diff` shows what changed)", file=sys.stderr)
    return path


_ANNOUNCED: set[Path] = set()  # the committed files ``write_json`` has said it writes (once each)


def random_llama(folder: str | Path, *, layers=4, hidden=256, heads=8, kv_heads=4, vocab=4096, seed=0,
                 max_positions=2048) -> Path:
    """Saves a random Llama checkpoint (transformers' own init) to ``folder`` and returns it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 8 * 8,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=max_positions, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder)
    return Path(folder)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(fig, path):
    """Lays ``fig`` out, writes it to ``path`` and closes it (a notebook or another long-lived process would
    otherwise keep every figure open, and show it again); returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path
