"""``check_attention``: another engine's ragged attention against minibass's float64 specification.

The function under test has the signature of ``minibass.attention.BACKENDS[name]``
(``minibass.attention.base``): ``fn(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None) -> out``, with
q ``[total_q, H, D]``, caches ``[B, Hk, capacity, D]`` and out ``[total_q, H, D]``.

Every case is a ragged batch whose cache slots at or beyond ``kv_lens`` hold NaN and inf (they
are stale by contract and must not reach the output). A fixed grid covers the shapes that
break kernels (idle sequences, prefill with ``q_len == kv_len``, single-token decode, one long
sequence next to short ones, chunks of 33 to 130 new tokens that span several query tiles of a
kernel, MHA / GQA / MQA, odd head dims, an explicit ``scale``); seeded random cases fill the
rest. The reference is ``naive`` run in float64 on the same inputs; the tolerance per dtype is
in ``ATOL`` (wide enough for bf16 and fp16 rounding on the way, as eager attention does it). q, the
lengths and the caches' valid slots must come back unchanged; the stale slots are the function's
to use (minibass's own PAD zeroes them, so that a NaN there cannot reach the output as 0 * NaN).
Three more cases, on large scores (``large_score_cases``), must give a finite output within
``LARGE_SCORE_ATOL`` of the reference: per dtype, far above rounding, as a correct kernel's
half-precision error grows with the scores, and still below an overflow hidden by ``nan_to_num``.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, replace

import torch

from ..attention import naive
from ..sampling import is_int
from . import stats
from .verdict import Verdict, raised

# Max abs error allowed against the float64 reference, per input dtype (bf16 keeps 8 bits of mantissa,
# fp16 11, fp32 24; sums may run in any order). In fp16 and bf16, twice the worst error of attention
# computed as transformers' eager code does (scores and weights rounded to the dtype on the way) over
# seeds 0-8 of the default 200 cases: 0.0037 in fp16 and 0.030 in bf16. A kernel that accumulates in
# fp32 and rounds once stays near a quarter of eager's error (bf16 0.008); the logic bugs of ``known_bugs``
# are off by 0.7 or more.
ATOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 8e-3, torch.bfloat16: 6e-2}


@dataclass(frozen=True)
class AttentionCase:
    """One ragged batch: per-sequence new-token and cache lengths, heads, head dim, seed."""

    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    n_heads: int
    n_kv_heads: int
    head_dim: int
    seed: int = 0
    label: str = "random"
    scale: float | None = None  # passed as ``scale=`` when set; None: the function's default, head_dim ** -0.5

    @property
    def size(self) -> int:
        """Work in (query, key, head, dim) units: the 'smallest failing case' is the least of these."""
        return sum(q * kv for q, kv in zip(self.q_lens, self.kv_lens)) * self.n_heads * self.head_dim + \
            sum(self.kv_lens)

    def tensors(self, dtype=torch.float32, device=None, poison: bool = True):
        """(q, k_cache, v_cache, q_lens, kv_lens), stale slots poisoned with NaN (K) and inf (V), or zero."""
        g = torch.Generator().manual_seed(self.seed)
        batch, capacity = len(self.q_lens), max(self.kv_lens) + 5
        q = torch.randn(sum(self.q_lens), self.n_heads, self.head_dim, generator=g)
        k = torch.randn(batch, self.n_kv_heads, capacity, self.head_dim, generator=g)
        v = torch.randn(batch, self.n_kv_heads, capacity, self.head_dim, generator=g)
        for b, n in enumerate(self.kv_lens):
            k[b, :, n:], v[b, :, n:] = (float("nan"), float("inf")) if poison else (0.0, 0.0)
        lens = torch.tensor(self.q_lens), torch.tensor(self.kv_lens)
        return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v)) + tuple(t.to(device) for t in lens)

    def __str__(self) -> str:
        scale = f", scale={self.scale}" if self.scale is not None else ""
        kind = "random case" if self.label == "random" else f"grid case '{self.label}'"
        return (f"{kind} (q_lens={list(self.q_lens)}, kv_lens={list(self.kv_lens)}, "
                f"heads={self.n_heads}/{self.n_kv_heads} (q/kv), head_dim={self.head_dim}{scale})")


SCALE = 0.3  # an explicit softmax scale unlike head_dim ** -0.5 of every head dim here (0.088 to 0.25)
GRID = [  # (label, q_lens, kv_lens, scale)
    ("single-token decode", (1,), (1,), None),
    ("decode, odd lengths", (1, 1, 1, 1, 1), (5, 64, 65, 130, 7), None),
    ("prefill q_len == kv_len", (9, 17), (9, 17), None),
    ("idle sequences", (0, 3, 0, 2), (12, 9, 1, 40), None),
    ("one long next to short", (2, 2, 2, 2), (300, 3, 4, 2), None),
    ("equal lengths (nothing ragged)", (4, 4, 4), (33, 33, 33), None),
    ("verify k + 1 tokens, ragged", (5, 3, 1, 5), (20, 41, 7, 5), None),
    # query tiles of 16, 32, 64 and 128 rows: chunks ending just past a tile, prefill and chunked prefill
    ("long chunks (chunked prefill)", (33, 130, 0, 65), (33, 150, 4, 200), None),
    ("explicit scale", (1, 4, 6, 0), (9, 4, 30, 3), SCALE),
    # split-KV (flash-decoding) kernels combine partial results past 512, 1024, 2048 keys
    ("long caches (split-KV decode)", (1, 1, 4, 1), (1030, 2049, 600, 3), None),
    # kernels with per-batch tables or a grid sized for a few sequences
    ("a wide batch of 33, decode and verify mixed", (1, 4, 0, 1, 2) * 6 + (1, 4, 1),
     tuple(range(5, 170, 5)), None),
]
# Beyond the grid's heads: a Llama-style 32 query heads over 8 kv heads (one case, added to the grid).
MANY_HEADS = ("32 query heads over 8 kv heads", (1, 3, 0, 5), (70, 9, 4, 130), 32, 8, 128)
HEADS = [(4, 4), (4, 2), (4, 1), (6, 3)]  # MHA, GQA, MQA, odd group count
# Large scores: the grid's verify shape at an explicit scale of 40 / sqrt(D), so that the scores have a standard
# deviation of about 40 and reach 100 to 160, past where exp overflows float32 (88.7), let alone float16 (11.09).
# A correct kernel subtracts each row's (running) maximum before exp and stays finite; the error is held only to
# LARGE_SCORE_ATOL there, as a correct kernel's half-precision error grows with the scores (see ``check_attention``).
LARGE_SCORES = ((5, 3, 1, 5), (20, 41, 7, 5), 40.0)
HEAD_DIMS = [16, 64, 59, 128]


def attention_cases(n: int, seed: int = 0, head_dims=None) -> list[AttentionCase]:
    """The grid (every shape with MHA, GQA and MQA and one odd head dim, and one case of many heads), then
    seeded random cases up to ``n`` in all; the grid is always there, whatever ``n``. ``head_dims``: the
    head dims a kernel supports; every case gets the supported one nearest its own (the larger on a tie)."""
    cases = _cases(n, seed)
    if head_dims is None:
        return cases
    return [replace(c, head_dim=min(head_dims, key=lambda d: (abs(d - c.head_dim), -d))) for c in cases]


def _cases(n: int, seed: int) -> list[AttentionCase]:
    cases = []
    for i, (label, q_lens, kv_lens, scale) in enumerate(GRID):
        for j, (h, hk) in enumerate(HEADS[:3]):
            cases.append(AttentionCase(q_lens, kv_lens, h, hk, (64, 59, 16)[j], seed + 1000 * i + j, label, scale))
    label, q_lens, kv_lens, h, hk, d = MANY_HEADS
    cases.append(AttentionCase(q_lens, kv_lens, h, hk, d, seed + 1000 * len(GRID), label))
    g = torch.Generator().manual_seed(seed)

    def draw(lo, hi):  # an integer in [lo, hi]
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    while len(cases) < n:
        batch = draw(1, 8)
        kv_lens = [draw(1, 160) for _ in range(batch)]
        q_lens = [draw(0, min(8, kv)) for kv in kv_lens]
        if draw(0, 3) == 0:  # one sequence prefilling its whole cache
            b = draw(0, batch - 1)
            kv_lens[b] = q_lens[b] = draw(1, 24)
        h, hk = HEADS[draw(0, len(HEADS) - 1)]
        cases.append(AttentionCase(tuple(q_lens), tuple(kv_lens), h, hk, HEAD_DIMS[draw(0, len(HEAD_DIMS) - 1)],
                                   seed + len(cases)))
    return cases


def large_score_cases(seed: int = 0, head_dims=None) -> list[AttentionCase]:
    """MHA, GQA and MQA at head dims 64, 59 and 16 (or the supported ones nearest) on scores of 100 to 160."""
    q_lens, kv_lens, spread = LARGE_SCORES
    cases = []
    for j, (h, hk) in enumerate(HEADS[:3]):
        d = (64, 59, 16)[j]
        if head_dims is not None:
            d = min(head_dims, key=lambda x: (abs(x - d), -x))
        cases.append(AttentionCase(q_lens, kv_lens, h, hk, d, seed + 7000 + j, "large scores", spread / d ** 0.5))
    return cases


# On large scores, per dtype: far above rounding, below a row gone wrong (the values are N(0, 1); an overflow whose
# NaN was replaced by a number is off by 3.2 or more on every seed at head dim 256, 2.8 at the default ones).
# Rounding grows with the scores: there, transformers' eager attention, which rounds the scores to the dtype, is
# off by up to 0.11 in float16 and 1.11 in bfloat16 (head dim 256, seeds 0-299), a correct float32 kernel by 2.5e-5.
LARGE_SCORE_ATOL = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 0.5, torch.bfloat16: 2.0}


# The small-score check of a failing large-score case: its scale divided by this. Not 40, which would make it
# head_dim ** -0.5, the default that a kernel ignoring ``scale`` uses: that kernel would be right there.
SMALL_SCORE_DIVISOR = 50


def _large_score_failures(fn, cases: list[AttentionCase], dtype, device) -> tuple[int, str]:
    """How many cases gave a non-finite output (or no output), or one off by more than ``LARGE_SCORE_ATOL``
    (an overflow hidden by ``nan_to_num``, say), and the first in words; stale slots are zero here."""
    bad, first = 0, ""
    for case in cases:
        q, k, v, q_lens, kv_lens = case.tensors(dtype, device, poison=False)
        try:
            out = _call(fn, case, (q, k, v, q_lens, kv_lens))
        except Exception as e:
            bad, first = bad + 1, first or f"{case}; {raised(e)}"
            continue
        if not torch.is_tensor(out) or out.layout != torch.strided or out.shape != q.shape or out.device != q.device \
                or out.dtype != q.dtype:
            bad, first = bad + 1, first or f"{case}; no output of q's shape, dtype and device (see the row above)"
            continue
        if torch.isfinite(out).all():
            diff = (out.detach().cpu().double() - reference(q, k, v, q_lens, kv_lens, case.scale)).abs()
            if float(diff.max()) <= LARGE_SCORE_ATOL[dtype]:
                continue
            row, head, _ = torch.nonzero(diff == diff.max())[0].tolist()
            what, hidden = f"finite, but off by {float(diff.max()):.3g}", "its NaN then replaced by a number? "
        else:
            row, head, _ = torch.nonzero(~torch.isfinite(out.detach().cpu()))[0].tolist()
            what, hidden = "non-finite output", ""
        # Right on the same case with small scores? Then the large scores are the trouble.
        small_err, small = _run_case(fn, replace(case, scale=case.scale / SMALL_SCORE_DIVISOR), dtype, device,
                                     poison=False)
        why = (f"an exp that overflowed (past 88.7 in float32, 11.09 in float16)? {hidden}Subtract each row's "
               f"running maximum before exp" if small_err <= ATOL[dtype] else
               f"wrong on this case's small scores too ({small}, at a scale {SMALL_SCORE_DIVISOR} times smaller)")
        bad, first = bad + 1, first or (
            f"{case}; {what} at {_where(row, head, q_lens, kv_lens)}, on scores up to {_largest_score(case):.0f}: "
            f"{why}")
    return bad, first


def _largest_score(case: AttentionCase) -> float:
    """The largest score a case's queries reach on the keys they may see (float64): what exp must not overflow on."""
    q, k, _, q_lens, kv_lens = case.tensors(torch.float64, poison=False)
    group, largest, start = case.n_heads // case.n_kv_heads, 0.0, 0
    for b, (n, m) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        if n:
            keys = k[b, :, :m].repeat_interleave(group, 0)  # (H, m, D)
            scores = torch.einsum("nhd,hmd->nhm", q[start:start + n], keys) * case.scale  # (n, H, m)
            visible = torch.arange(m) <= torch.arange(m - n, m)[:, None]  # (n, m): causal
            largest = max(largest, float(scores.masked_fill(~visible[:, None], float("-inf")).max()))
        start += n
    return largest


def reference(q, k, v, q_lens, kv_lens, scale: float | None = None) -> torch.Tensor:
    """The specification in float64 on the CPU."""
    return naive(*(t.detach().cpu().double() for t in (q, k, v)), q_lens.cpu(), kv_lens.cpu(), scale=scale)


def _run_case(fn, case: AttentionCase, dtype, device, poison: bool = True) -> tuple[float, str]:
    """(max abs error, problem in words or ''); an exception, bad output or changed input is an infinite error.
    ``poison``: NaN and inf in the stale cache slots (False: zeros)."""
    inputs = case.tensors(dtype, device, poison=poison)
    q, k, v, q_lens, kv_lens = given = tuple(t.clone() for t in inputs)  # the function gets copies
    expected = reference(*inputs, scale=case.scale)
    try:
        out = _call(fn, case, (q, k, v, q_lens, kv_lens))
    except Exception as e:  # the engine raised on a valid input
        return float("inf"), raised(e)
    changed = _changed(inputs, given)
    if changed:
        return float("inf"), f"modified {', '.join(changed)} in place: inputs belong to the caller"
    if not torch.is_tensor(out):
        return float("inf"), f"returned a {type(out).__name__}, expected a torch tensor of shape {tuple(q.shape)}"
    if out.layout != torch.strided:
        return float("inf"), f"returned a tensor of layout {out.layout}, expected a dense (strided) one"
    if tuple(out.shape) != tuple(q.shape):
        return float("inf"), f"returned shape {tuple(out.shape)}, expected {tuple(q.shape)}"
    if out.dtype != q.dtype:
        return float("inf"), f"returned dtype {out.dtype}, expected {q.dtype}"
    if out.device != q.device:
        return float("inf"), f"returned a tensor on device {out.device}, expected {q.device} (the inputs' device)"
    out = out.detach().cpu().double()
    if not torch.isfinite(out).all():
        row, head, _ = torch.nonzero(~torch.isfinite(out))[0].tolist()
        cause = _non_finite_cause(fn, case, dtype, device)
        return float("inf"), f"non-finite output at {_where(row, head, q_lens, kv_lens)}: {cause}"
    if not out.numel():
        return 0.0, ""
    diff = (out - expected).abs()
    err = float(diff.max())
    row, head, _ = torch.nonzero(diff == err)[0].tolist()
    return err, f"max error {err:.3g} at {_where(row, head, q_lens, kv_lens)}"


def _call(fn, case: AttentionCase, inputs: tuple):
    """``fn`` on a case's inputs, passing ``scale=`` only where the case sets one (the default is the function's)."""
    return fn(*inputs) if case.scale is None else fn(*inputs, scale=case.scale)


def _non_finite_cause(fn, case: AttentionCase, dtype, device) -> str:
    """Why the output was not finite, told apart by running the case again with the stale slots zeroed."""
    try:
        out = _call(fn, case, case.tensors(dtype, device, poison=False))
        finite = bool(torch.isfinite(out.to_dense()).all())
    except Exception:  # it raised this time: say nothing more than the first run showed
        return "a stale slot (NaN/inf past kv_lens) leaked in?"
    if finite:
        return ("a stale slot (NaN/inf past kv_lens) leaked in: with the stale slots zeroed the output is finite (a "
                "key read at or past kv_lens: padding masked other than by -inf, the lengths ignored, or a causal "
                "mask one key too wide, which reads the slot at kv_lens from a sequence's last query)")
    return ("still non-finite with the stale slots zeroed: a query row left with no key to attend to (a causal "
            "mask off by one?), or an overflow in the kernel's own arithmetic")


def _changed(inputs: tuple, given: tuple) -> list[str]:
    """The inputs the function changed in place: q, a length, or a cache's valid slots (positions below
    kv_lens; the stale slots beyond hold garbage by contract and are the function's to overwrite)."""
    q, k, _, _, kv_lens = inputs
    valid = (torch.arange(k.shape[2], device=k.device) < kv_lens[:, None])[:, None, :, None]  # (B, 1, C, 1)
    names = []
    for name, before, after in zip(("q", "k_cache", "v_cache", "q_lens", "kv_lens"), inputs, given):
        if before.shape != after.shape or before.dtype != after.dtype:
            names.append(name)
        elif name.endswith("cache"):
            if not torch.equal(torch.where(valid, before, 0), torch.where(valid, after, 0)):
                names.append(f"{name} (valid slots)")
        elif not torch.equal(before, after):
            names.append(name)
    return names


def _where(row: int, head: int, q_lens, kv_lens) -> str:
    """A packed query row in words: its sequence, its index there, its absolute position, the head."""
    q_lens, kv_lens = q_lens.cpu(), kv_lens.cpu()
    seq = int(torch.searchsorted(torch.cumsum(q_lens, 0), torch.tensor(row), right=True))
    index = row - int(q_lens[:seq].sum())
    return f"sequence {seq}, query {index} (position {int(kv_lens[seq]) - int(q_lens[seq]) + index}), head {head}"


def check_attention(fn, *, dtypes=(torch.float32,), device=None, cases: int = 200, seed: int = 0,
                    name: str | None = None, head_dims=None) -> Verdict:
    """Compare ``fn`` with the float64 specification on ``cases`` ragged batches per dtype (at least the
    34 of the grid).

    ``fn``: an attention function of minibass's one signature, ``fn(q, k_cache, v_cache, q_lens, kv_lens, *,
    scale=None)`` -> ``[total_q, H, D]`` (shapes and rules: ``minibass.attention.base``).

    Two verdict rows per dtype. The first: the worst error over all cases against ``ATOL[dtype]``; a
    failing row names the smallest failing case (least work) with the position of its largest error, the
    case with the worst error when it is another one, and how many cases failed. The second: how many of
    the three ``large_score_cases`` (scores of 100 to 160) gave a non-finite output or one off by more than
    ``LARGE_SCORE_ATOL[dtype]``, which must be none: an exp that overflows without the row's maximum
    subtracted shows there, whether its NaN reaches the output or is replaced by a number. ``dtypes``: one dtype or
    several. ``head_dims``: for a kernel that supports only some head dims (FlashAttention-2 multiples
    of 8, others 64, 128 and 256), an int or a list of them; every case then runs at the supported
    head dim nearest its own. By default the cases use head dims 16, 59, 64 and 128.
    """
    if not is_int(cases) or cases < 1:
        raise ValueError(f"cases must be an int >= 1, got {cases!r}")
    stats.check_call(fn, seed)
    if head_dims is not None:
        given = head_dims
        head_dims = tuple(head_dims) if isinstance(head_dims, (list, tuple, set, frozenset, range)) else (head_dims,)
        if not head_dims or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1
                                for d in head_dims):
            raise ValueError(f"head_dims must be an int >= 1 or a list of them, got {given!r}")
        head_dims = tuple(sorted({int(d) for d in head_dims}))
    if isinstance(dtypes, str):
        raise ValueError(f"dtypes are torch dtypes (torch.float32, ...), got the string {dtypes!r}")
    dtypes = (dtypes,) if isinstance(dtypes, torch.dtype) else tuple(dtypes)
    unknown = [d for d in dtypes if d not in ATOL]
    if unknown or not dtypes:
        raise ValueError(f"dtypes must be one or more of {', '.join(map(str, ATOL))}, got {unknown or 'none'}")
    try:
        holds_data = torch.empty(0, device=device).device.type != "meta"  # meta tensors have shapes, not values
    except Exception as e:  # a malformed name ("cdua"), or a device this machine lacks
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if why.startswith("Could not run"):  # a backend this build lacks: the dispatcher's 50 lines of those it has
            why = f"this build of PyTorch has no {torch.device(device).type} backend"
        raise ValueError(f"device {device!r} cannot hold tensors here: {why}") from None
    if not holds_data:
        raise ValueError(f"device {device!r} holds no values (meta tensors have only shapes): nothing to compare")
    started = time.perf_counter()
    verdict = Verdict(f"attention {name or getattr(fn, '__qualname__', repr(fn))}")
    all_cases = sorted(attention_cases(cases, seed, head_dims), key=lambda c: c.size)
    large = large_score_cases(seed, head_dims)
    top_score = max(map(_largest_score, large))
    for dtype in dtypes:
        worst, worst_case, failing, n_failed = 0.0, "", "", 0
        raised_at: dict[int, list[bool]] = {}  # head dim -> whether each case there raised
        for case in all_cases:
            err, problem = _run_case(fn, case, dtype, device)
            raised_at.setdefault(case.head_dim, []).append(problem.startswith("raised "))
            if err > worst or (err == worst and not worst_case):
                worst, worst_case = err, f"{case}; {problem}"
            if err > ATOL[dtype]:
                n_failed += 1
                failing = failing or f"{case}; {problem}"  # cases are sorted: the first is the smallest
        detail = ""
        if n_failed:
            worst_too = f". Worst: {worst_case}" if worst_case != failing else " (also the worst)"
            detail = f"smallest: {failing}{worst_too}. {n_failed} of {len(all_cases)} cases failed"
            if any(map(all, raised_at.values())) and not all(map(any, raised_at.values())):
                # it raised on every case of some head dims and on none of others: head dims it does not support?
                refused = [str(d) for d, r in sorted(raised_at.items()) if all(r)]
                dims = refused[0] if len(refused) == 1 else ", ".join(refused[:-1]) + " and " + refused[-1]
                detail += (f". It raised on every case of head dim{'s' if len(refused) > 1 else ''} {dims} and ran "
                           f"the others: a kernel for some head dims only can say which (head_dims=, --head-dims)")
        verdict.add(f"{str(dtype).replace('torch.', '')} vs float64 spec",
                    f"max abs error over {len(all_cases)} ragged cases, stale slots NaN/inf", worst, ATOL[dtype],
                    detail=detail)
        bad, first = _large_score_failures(fn, large, dtype, device)
        verdict.add(f"{str(dtype).replace('torch.', '')} on large scores",
                    f"cases with a non-finite output or one off by > {LARGE_SCORE_ATOL[dtype]:g}, of {len(large)}, "
                    f"scores up to {top_score:.0f}", bad, 0,
                    detail=f"{first} ({bad} of {len(large)} cases)" if bad else "")
    verdict.notes.append(f"device {device or 'cpu'}; tolerance per dtype {', '.join(f'{str(d)[6:]} {ATOL[d]:g}' for d in dtypes)}")
    largest = [max(len(c.q_lens) for c in all_cases), max(max(c.kv_lens) for c in all_cases),
               max(max(c.q_lens) for c in all_cases), max(c.n_heads for c in all_cases),
               max(c.head_dim for c in all_cases)]
    verdict.notes.append("cases covered up to: batch {}, {} cached keys, {} new tokens per sequence, {} query heads, "
                         "head dim {}; a kernel may still fail beyond these".format(*largest))
    if torch.bfloat16 in dtypes:
        verdict.notes.append("bfloat16 cannot see small bugs: correct kernels reach an error of 0.03 there, and a bug "
                             "that drops or doubles one key of a long cache can stay below the tolerance; check in "
                             "float16 or float32 too where the kernel runs them")
    if head_dims is not None:
        tested = sorted({c.head_dim for c in all_cases})
        unreached = [d for d in head_dims if d not in tested]
        verdict.notes.append(f"head dims tested: {', '.join(map(str, tested))} (of the head_dims given"
                             + (f"; no case is nearest to {', '.join(map(str, unreached))}" if unreached else "")
                             + "; without head_dims the cases use 16, 59, 64 and 128)")
    verdict.seconds = time.perf_counter() - started
    return verdict
