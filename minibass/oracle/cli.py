"""``python -m minibass oracle {attention,sampler,generator} TARGET``: the oracle from a shell.

TARGET is ``package.module:function`` (imported from the current directory and ``sys.path``)
or an adapter name: ``minibass`` (minibass's own part, as a reference) or ``transformers``
(the installed transformers' rejection step, or its assisted generation). Exit status: 0 when
every check passed, 1 when one failed (the code under test raising or returning something malformed
included: the verdict says what and where), 2 for a usage error (unknown target, a module that does
not import, a bad option such as an alpha outside (0, 1), a device this machine lacks, or an option
of another kind of check, such as ``--rows`` for attention).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from dataclasses import replace

import torch

from .verdict import raised

ADAPTERS = {
    "attention": {"minibass": ("minibass.attention:padded", None)},
    "sampler": {"minibass": ("minibass.rejection:rejection_sample", "minibass.rejection:accept_and_resample"),
                "transformers": ("minibass.oracle.adapters:transformers_sampler",
                                 "minibass.oracle.adapters:transformers_given_uniforms")},
    "generator": {"minibass": ("minibass.oracle.adapters:minibass_generator", None),
                  "transformers": ("minibass.oracle.adapters:transformers_generator", None)},
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def resolve(target: str, adapters=(), option: str = "TARGET"):
    """'package.module:function' -> the function; ValueError with what was expected otherwise
    (``adapters``: the adapter names the message lists; ``option``: where the name came from)."""
    if ":" not in target:
        names = f" ({', '.join(adapters)})" if adapters else ""
        raise ValueError(f"{option} must be 'package.module:function' or an adapter name{names}, got {target!r}")
    module_name, _, attr = target.partition(":")
    if "" not in sys.path:
        sys.path.insert(0, "")  # the current directory, as `python -m` would
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import {module_name!r} for {option} {target!r}: {e}") from e
    except Exception as e:  # the module itself raised while being imported
        raise ValueError(f"cannot import {module_name!r} for {option} {target!r}: {raised(e)}") from e
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"{module_name!r} has no attribute {attr!r} ({option} {target!r})")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"{option} {target!r} is not callable")
    return fn


# Options that belong to one or two kinds of check, with their defaults. Each defaults to None on the
# parser, so that one given to another kind is a usage error rather than silently ignored.
OPTIONS = {
    "cases": (("attention",), 200), "dtypes": (("attention",), ["float32"]), "device": (("attention",), None),
    "head_dims": (("attention",), None),
    "rows": (("sampler",), 200_000), "uniforms": (("sampler",), None), "uniforms_dtype": (("sampler",), None),
    "samples": (("generator",), 20_000), "n_tokens": (("generator",), 3), "head_dim": (("generator",), 8),
    "temperature": (("generator",), 1.0), "top_k": (("generator",), 0), "top_p": (("generator",), 1.0),
    "alpha": (("sampler", "generator"), 1e-6),
}


def add_parser(sub) -> None:
    p = sub.add_parser("oracle", help="check another engine's attention, rejection sampler or generator",
                       description=(__doc__ or "").replace("``", ""),  # the docstring's code marks, read in a terminal
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=sorted(ADAPTERS))
    p.add_argument("target", help="package.module:function, or an adapter: minibass, transformers")
    p.add_argument("--cases", type=int, help="attention: ragged cases per dtype (default 200)")
    p.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), help="attention: dtypes (default float32)")
    p.add_argument("--device", help="attention: device of the inputs (default cpu)")
    p.add_argument("--head-dims", type=int, nargs="+", help="attention: the head dims your kernel supports, e.g. "
                                                            "64 128 256; each case runs at the nearest one "
                                                            "(default: the cases' own, 16, 59, 64 and 128)")
    p.add_argument("--rows", type=int, help="sampler: rows per setup (default 200000)")
    p.add_argument("--uniforms", help="sampler: package.module:function taking its uniforms (accept_and_resample's "
                                      "signature) for the edge-uniform probe, or an adapter name; the adapters "
                                      "minibass and transformers bring theirs")
    p.add_argument("--uniforms-dtype", choices=["float32", "float64"],
                   help="sampler: dtype of the edge-uniform probe's uniforms and probabilities (default float64; "
                        "float32 for a step that computes in float32, with float32's own edge values)")
    p.add_argument("--samples", type=int, help="generator: continuations to sample (default 20000)")
    p.add_argument("--n-tokens", type=int, help="generator: tokens per continuation tested (default 3); must exceed "
                                                "the engine's draft length for its bonus token to be tested")
    p.add_argument("--head-dim", type=int, help="generator: head dim of the oracle's pair (default 8; 64 for "
                                                "engines whose kernels need it)")
    p.add_argument("--temperature", type=float, help="generator: sampling temperature (default 1)")
    p.add_argument("--top-k", type=int, help="generator: top-k (default 0, off)")
    p.add_argument("--top-p", type=float, help="generator: top-p (default 1, off)")
    p.add_argument("--alpha", type=float, help="sampler, generator: false-alarm rate of the whole verdict "
                                               "(default 1e-6)")
    p.add_argument("--seed", type=seed_value, default=0, help="seed of the cases, rows or samples drawn (default 0)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON (alone on stdout: whatever the "
                                                       "code under test prints goes to stderr)")
    p.set_defaults(func=run)


def seed_value(text: str) -> int:
    """--seed: an int in [0, 2**63), the seeds minibass's random streams take."""
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2 ** 63:
        raise argparse.ArgumentTypeError(f"must be an int in [0, 2**63), got {text!r}")
    return seed


def _options(args) -> None:
    """Reject options of another kind of check; fill in the defaults of this kind's."""
    for name, (kinds, default) in OPTIONS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
        elif args.kind not in kinds:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} applies to the {' and '.join(kinds)} check{'s' if len(kinds) > 1 else ''} "
                             f"only, not to {args.kind}")


def run(args) -> int:
    from minibass import oracle

    _options(args)
    oracle.stats.check_alpha(args.alpha)
    with _stdout_to_stderr():  # stdout carries the verdict alone (``--json`` is read from it)
        adapters = ADAPTERS[args.kind]
        fn_name, uniforms_name = adapters.get(args.target, (args.target, None))
        others = [kind for kind, names in ADAPTERS.items() if args.target in names and kind != args.kind]
        if others and args.target not in adapters:  # an adapter name, but not of this check
            raise ValueError(f"{args.target!r} has no {args.kind} adapter (it has one for the {' and '.join(others)} "
                             f"check{'s' * (len(others) > 1)}); the {args.kind} adapters: "
                             f"{', '.join(sorted(adapters))}, or give 'package.module:function'")
        fn = resolve(fn_name, sorted(adapters))  # importing the engine may print: inside
        uniforms = None
        if args.uniforms is not None:  # resolved before anything runs: a typo costs nothing
            name = adapters[args.uniforms][1] if args.uniforms in adapters else args.uniforms
            uniforms = resolve(name, sorted(adapters), option="--uniforms")
        elif uniforms_name:
            uniforms = resolve(uniforms_name)
        if uniforms is None and args.uniforms_dtype is not None:
            raise ValueError("--uniforms-dtype sets the edge-uniform probe, which needs --uniforms (or an adapter "
                             "that brings one)")
        verdict = _check(args, fn, uniforms)
    print(verdict.to_json() if args.json else verdict)
    return 0 if verdict.ok else 1


@contextlib.contextmanager
def _stdout_to_stderr():
    """Everything written to stdout inside goes to stderr: Python's ``print``, a logging handler holding the
    original ``sys.stdout``, and C code or subprocesses writing to file descriptor 1."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.__stdout__.flush()  # what went through the original stream, to stderr still
        os.dup2(saved, 1)
        os.close(saved)


def _check(args, fn, uniforms):
    from minibass import SamplingParams, oracle

    label = args.target
    if args.kind == "attention":
        verdict = oracle.check_attention(fn, dtypes=tuple(DTYPES[d] for d in args.dtypes), device=args.device,
                                         cases=args.cases, seed=args.seed, name=label, head_dims=args.head_dims)
    elif args.kind == "sampler":
        verdict = oracle.check_sampler(fn, rows=args.rows, alpha=args.alpha, seed=args.seed, name=label)
        if uniforms is not None:
            probe = oracle.check_given_uniforms(uniforms, name=args.uniforms or label,
                                                dtype=DTYPES[args.uniforms_dtype or "float64"])
            if args.uniforms is not None:  # another function than the one under test: its rows say whose they are
                probe.checks = [replace(c, name=f"{c.name} ({args.uniforms})") for c in probe.checks]
            verdict.checks += probe.checks
            verdict.seconds += probe.seconds
    else:
        sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
        verdict = oracle.check_generator(fn, n_tokens=args.n_tokens, samples=args.samples, sampling=sampling,
                                         alpha=args.alpha, seed=args.seed, name=label, head_dim=args.head_dim)
    return verdict
