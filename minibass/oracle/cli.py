"""``python -m minibass oracle {attention,sampler,generator} TARGET``: the oracle from a shell.

TARGET is ``package.module:function`` (imported from the current directory and ``sys.path``)
or an adapter name: ``minibass`` (minibass's own part, as a reference) or ``transformers``
(the installed transformers' rejection step, or its assisted generation). Exit status: 0 when
every check passed, 1 when one failed (the code under test raising or returning something malformed
included: the verdict says what and where), 2 for a usage error (unknown target, a module that does
not import, a bad option such as an alpha outside (0, 1) or a device this machine lacks).
"""

from __future__ import annotations

import argparse
import importlib
import sys

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


def resolve(target: str, adapters=()):
    """'package.module:function' -> the function; ValueError with what was expected otherwise
    (``adapters``: the adapter names the message lists)."""
    if ":" not in target:
        names = f" ({', '.join(adapters)})" if adapters else ""
        raise ValueError(f"TARGET must be 'package.module:function' or an adapter name{names}, got {target!r}")
    module_name, _, attr = target.partition(":")
    if "" not in sys.path:
        sys.path.insert(0, "")  # the current directory, as `python -m` would
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import {module_name!r} for TARGET {target!r}: {e}") from e
    except Exception as e:  # the module itself raised while being imported
        raise ValueError(f"cannot import {module_name!r} for TARGET {target!r}: {raised(e)}") from e
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"{module_name!r} has no attribute {attr!r} (TARGET {target!r})")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"TARGET {target!r} is not callable")
    return fn


def add_parser(sub) -> None:
    p = sub.add_parser("oracle", help="check another engine's attention, rejection sampler or generator",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=sorted(ADAPTERS))
    p.add_argument("target", help="package.module:function, or an adapter: minibass, transformers")
    p.add_argument("--uniforms", help="sampler only: package.module:function taking its uniforms "
                                      "(accept_and_resample's signature) for the edge-uniform probe")
    p.add_argument("--cases", type=int, default=200, help="attention: ragged cases per dtype")
    p.add_argument("--dtypes", nargs="+", default=["float32"], choices=sorted(DTYPES), help="attention: dtypes")
    p.add_argument("--device", default=None, help="attention: device of the inputs (default cpu)")
    p.add_argument("--rows", type=int, default=200_000, help="sampler: rows per setup")
    p.add_argument("--samples", type=int, default=20_000, help="generator: continuations to sample")
    p.add_argument("--n-tokens", type=int, default=3, help="generator: tokens per continuation tested; must exceed "
                                                          "the engine's draft length for its bonus token to be tested")
    p.add_argument("--temperature", type=float, default=1.0, help="generator: sampling temperature")
    p.add_argument("--top-k", type=int, default=0, help="generator: top-k (0 disables)")
    p.add_argument("--top-p", type=float, default=1.0, help="generator: top-p (1 disables)")
    p.add_argument("--alpha", type=float, default=1e-6, help="false-alarm rate of the whole verdict")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from minibass import SamplingParams, oracle

    oracle.stats.check_alpha(args.alpha)
    fn_name, uniforms_name = ADAPTERS[args.kind].get(args.target, (args.target, None))
    uniforms_name = args.uniforms or uniforms_name
    if uniforms_name and args.kind != "sampler":
        raise ValueError("--uniforms applies to the sampler check only")
    fn = resolve(fn_name, sorted(ADAPTERS[args.kind]))
    label = args.target
    if args.kind == "attention":
        verdict = oracle.check_attention(fn, dtypes=tuple(DTYPES[d] for d in args.dtypes), device=args.device,
                                         cases=args.cases, seed=args.seed, name=label)
    elif args.kind == "sampler":
        verdict = oracle.check_sampler(fn, rows=args.rows, alpha=args.alpha, seed=args.seed, name=label)
        if uniforms_name:
            probe = oracle.check_given_uniforms(resolve(uniforms_name), name=label)
            verdict.checks += probe.checks
            verdict.seconds += probe.seconds
    else:
        sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
        verdict = oracle.check_generator(fn, n_tokens=args.n_tokens, samples=args.samples, sampling=sampling,
                                         alpha=args.alpha, seed=args.seed, name=label)
    print(verdict.to_json() if args.json else verdict)
    return 0 if verdict.ok else 1
