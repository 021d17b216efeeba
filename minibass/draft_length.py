"""How many tokens the draft proposes at each step: fixed, BASS's dynamic heuristic, per sequence, or cost-aware.

A policy answers ``lengths(active)`` before a step (one draft length per active sequence) and
hears ``update(active, proposed, accepted)`` after it. The loop may propose fewer tokens than
asked near a sequence's budget (never past ``max_new_tokens``); ``proposed`` says what was used.
Any object with these two methods can be passed as ``draft_length``. A policy that also has
``observe_costs(k, draft_seconds, verify_seconds)`` hears, after each step, how long that step's
draft calls (k of them) took, and the rest of the step (the verify call, acceptance, roll-back and
the loop's own bookkeeping: everything a step costs but the draft calls). A policy that has
``start(batch_size)`` hears it when a call of ``speculative_generate`` begins: its sequences are
new ones. So one policy object can serve call after call: what describes the text is forgotten
(Algorithm 1's lengths start again at 7, the cost-aware policy forgets each sequence's acceptance)
and what describes the machine is kept (the cost-aware policy's timings).

Every policy decides from the past only, so the output distribution does not depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from .sampling import is_int


class DraftLengthPolicy(Protocol):
    def lengths(self, active: list[int]) -> list[int]: ...

    def update(self, active: list[int], proposed: list[int], accepted: list[int]) -> None: ...


@dataclass
class FixedDraftLength:
    """Always k tokens."""

    k: int

    def __post_init__(self):
        if not is_int(self.k) or self.k < 1:
            raise ValueError(f"draft_length must be an int >= 1, 'dynamic', 'per-sequence', 'auto' or a policy "
                             f"object; got {self.k!r}")
        self.k = int(self.k)  # a NumPy integer becomes a plain int, which the loop expects

    def lengths(self, active):
        return [self.k] * len(active)

    def update(self, active, proposed, accepted):
        pass


@dataclass
class BassDynamicDraftLength:
    """BASS Algorithm 1 (Qian et al. 2024, §3.3): one draft length for the whole batch.

    Start at l_draft = 7. After each step, with x the most tokens any sequence that drafted accepted
    (a sequence capped by its token budget to 0 drafts proposed nothing and does not count):
      * if that sequence accepted its whole draft:  l = min(l + l_incre, l_limit);  s = 0
      * otherwise:  l = max(1, x, l - ceil(l / l_mod) - s);  s = 1
    so the length grows quickly while drafts are fully accepted, and shrinks faster on
    consecutive misses (s adds one more). Constants as in the paper: l_incre = 2, l_mod = 10,
    l_limit = 32.
    """

    l_draft: int = 7
    l_incre: int = 2
    l_mod: int = 10
    l_limit: int = 32
    s: int = 0

    def __post_init__(self):
        self.initial = (self.l_draft, self.s)

    def start(self, batch_size: int) -> None:
        self.l_draft, self.s = self.initial  # a new batch starts again at l_draft = 7, as in the paper

    def lengths(self, active):
        return [self.l_draft] * len(active)

    def update(self, active, proposed, accepted):
        drafted = [i for i, k in enumerate(proposed) if k > 0]  # a sequence that proposed nothing does not decide
        if not drafted:
            return
        best = max(drafted, key=lambda i: (accepted[i], accepted[i] == proposed[i]))
        if accepted[best] == proposed[best]:
            self.l_draft = min(self.l_draft + self.l_incre, self.l_limit)
            self.s = 0
        else:
            self.l_draft = max(1, accepted[best], self.l_draft - math.ceil(self.l_draft / self.l_mod) - self.s)
            self.s = 1


@dataclass
class PerSequenceDynamicDraftLength:
    """Algorithm 1 run separately for every sequence: each drafts its own length.

    BASS keeps one length for the batch because its padded kernels want equal shapes; the ragged
    kernel does not care, so each sequence can adapt to its own acceptance.
    """

    states: dict[int, BassDynamicDraftLength] = field(default_factory=dict)

    def start(self, batch_size: int) -> None:
        self.states.clear()  # new sequences: each starts again at l_draft = 7

    def lengths(self, active):
        return [self.states.setdefault(b, BassDynamicDraftLength()).lengths([b])[0] for b in active]

    def update(self, active, proposed, accepted):
        for b, k, n in zip(active, proposed, accepted):
            self.states[b].update([b], [k], [n])


@dataclass
class DraftCosts:
    """Seconds per step: one draft call, and the rest of the step (the verify call, acceptance and
    roll-back) as ``verify_base + verify_per_token * (k + 1)``."""

    draft_call: float
    verify_base: float
    verify_per_token: float

    def step(self, k: int) -> float:
        return self.verify_base + self.verify_per_token * (k + 1) + k * self.draft_call


def expected_tokens(alpha: float, k: int) -> float:
    """E[tokens emitted by one sequence in a step] = (1 - alpha^(k+1)) / (1 - alpha) for per-token
    acceptance alpha: the accepted prefix plus the one token the target adds (Leviathan et al. 2023, eq. 1)."""
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass
class CostAwareDraftLength:
    """``draft_length="auto"``: the k that maximises expected tokens per second of the batch.

        k* = argmax_{1 <= k <= k_max}  E[tokens | alpha_min, k] / (cost_verify(k) + k * cost_draft)

    alpha_b, sequence b's per-token acceptance, is the mean of a Beta posterior over its recent
    trials: each accepted draft token a success, each rejection a failure, older steps weighted
    down by ``memory`` per step (0.9), because acceptance comes in runs (a draft that starts
    copying the target, a repeated line or a closing bracket, keeps being right for a while, then
    stops). Its prior is the batch's pooled estimate (every active sequence's trials together,
    under a Beta(1/2, 1/2) prior), worth ``pull`` trials (10: about half of the ~18 trials a
    sequence's forgetting history holds at k = 2 and alpha 0.75), so that a few unlucky rejections
    do not make a sequence look like the slowest: the lowest of many short, noisy estimates is too
    low. alpha_min is the lowest alpha_b among the active sequences, because a batch keeps stepping
    until its slowest sequence is done, and every step costs the whole batch.

    The costs are the ``costs`` given, or else measured as the loop runs (``observe_costs``), for
    the batch size at hand (see ``measured_costs`` for a batch that has shrunk): the fastest time
    seen per draft call, and a least-squares line through the rest of a step (verify, acceptance,
    roll-back, the loop's bookkeeping) at each k, each k priced by the fastest of its ``recent``
    (3) latest steps. A slow spell of the machine only
    ever adds time, so the fastest is the step's own cost; the latest few, the same number for
    every k, so that the k tried most often does not look cheaper only because its minimum is
    taken over more samples (the fastest of 20 noisy timings is lower than the fastest of 2).
    Until two draft lengths have been timed twice each at this batch size (or a larger one) it
    tries k = 1, 3, 1, 3 (cheap steps, far enough apart to draw a line).

    Where it differs from BASS's Algorithm 1 (``"dynamic"``): Algorithm 1 follows the *best*
    sequence of the batch and ignores what a step costs; this policy follows the *slowest* and
    weighs the measured price of a longer draft, so it stops growing k when the verify call and
    the extra draft calls cost more than the extra tokens they are expected to bring.

    One object can serve many calls (``draft_length=policy``): ``start`` forgets the sequences of
    the previous call and keeps the timings, so only its first call tries k = 1, 3, 1, 3, and a later
    call only where its batch is larger than any timed (a run of short calls, e.g. one prompt at a
    time, would otherwise spend the first steps of each on those trials).

    With measured costs the chosen lengths depend on timings, so under sampling two runs with the
    same seed can differ token by token (each is still exact in distribution); pass ``costs`` for
    reproducible runs. Greedy decoding gives the same tokens whatever the lengths.
    """

    k_max: int = 16
    costs: DraftCosts | None = None
    memory: float = 0.9
    pull: float = 10.0
    recent: int = 3
    successes: dict[int, float] = field(default_factory=dict)
    failures: dict[int, float] = field(default_factory=dict)
    draft_times: dict[int, list[float]] = field(default_factory=dict)  # batch -> seconds per draft call, per step
    verify_times: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # (batch, k) -> seconds
    batch: int = 0  # how many sequences were active in the latest step

    def __post_init__(self):
        if not is_int(self.k_max) or self.k_max < 1:
            raise ValueError(f"k_max must be an int >= 1, got {self.k_max!r}")
        self.k_max = int(self.k_max)
        if not 0 <= self.memory <= 1:
            raise ValueError(f"memory must be in [0, 1], got {self.memory!r}")
        if self.pull < 0:
            raise ValueError(f"pull must be >= 0, got {self.pull!r}")
        if not is_int(self.recent) or self.recent < 1:
            raise ValueError(f"recent must be an int >= 1, got {self.recent!r}")
        self.recent = int(self.recent)

    def alphas(self, active: list[int]) -> list[float]:
        """The per-token acceptance of each active sequence (posterior means, see the class)."""
        s = [self.successes.get(b, 0.0) for b in active]
        f = [self.failures.get(b, 0.0) for b in active]
        batch = (0.5 + sum(s)) / (1 + sum(s) + sum(f))  # pooled, under Beta(1/2, 1/2)
        return [(s_b + self.pull * batch) / (s_b + f_b + self.pull) for s_b, f_b in zip(s, f)]

    def measured_costs(self, batch: int | None = None) -> DraftCosts | None:
        """Costs from the timings seen, at ``batch`` sequences; None until two lengths are timed twice
        at this batch size or a larger one.

        The batch shrinks as sequences finish. A smaller batch is priced from its own timings once two
        lengths have been timed ``recent`` times there, and until then from the nearest larger batch
        timed at two lengths: a line through a few noisy timings can come out far too steep."""
        by_batch: dict[int, dict[int, list[float]]] = {}
        for (n, k), times in self.verify_times.items():
            by_batch.setdefault(n, {})[k] = times

        def lengths_timed(n: int, times: int) -> int:  # how many lengths were timed that often at batch n
            return sum(len(t) >= times for t in by_batch[n].values())

        usable = [n for n in by_batch if lengths_timed(n, 2) >= 2]
        if not usable:
            return None
        larger = [m for m in usable if batch is None or m > batch]
        if batch in usable and (lengths_timed(batch, self.recent) >= 2 or not larger):
            n = batch
        elif larger:
            n = min(larger)
        else:  # larger than any batch timed (a policy serving a new call): time this one first
            return None
        # The fastest of the latest few: a slow spell of the machine only ever adds time, so the
        # minimum is the step's own cost; over as many samples for every k (see the class). Lengths
        # timed once are left out: one timing cannot drop a slow spell.
        ks = [k for k in sorted(by_batch[n]) if len(by_batch[n][k]) >= 2]
        xs = [k + 1.0 for k in ks]
        ys = [min(by_batch[n][k][-self.recent:]) for k in ks]
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
        slope = max(slope, 0.0)  # a verify of more tokens never costs less
        base = max(mean_y - slope * mean_x, 0.0)
        return DraftCosts(min(self.draft_times[n]), base, slope)

    def choose(self, active: list[int]) -> int:
        costs = self.costs or self.measured_costs(len(active))
        if costs is None:  # not enough timings at this batch size (or a larger one) yet: try k = 1, 3, 1, 3
            short, long = 1, min(3, self.k_max)
            timed = {k: sum(len(t) for (n, j), t in self.verify_times.items() if j == k and n >= len(active))
                     for k in (short, long)}
            return long if timed[short] > timed[long] else short
        slowest = min(self.alphas(active))
        return max(range(1, self.k_max + 1), key=lambda k: expected_tokens(slowest, k) / costs.step(k))

    def start(self, batch_size: int) -> None:
        """A new call: its sequences are new, so their acceptance is forgotten; the timings are kept."""
        self.successes.clear()
        self.failures.clear()
        self.batch = 0

    def lengths(self, active):
        self.batch = len(active)  # the step about to run: its verify call feeds every active sequence
        return [self.choose(active)] * len(active)

    def update(self, active, proposed, accepted):
        for b, k, n in zip(active, proposed, accepted):
            if k > 0:
                self.successes[b] = self.memory * self.successes.get(b, 0) + n
                self.failures[b] = self.memory * self.failures.get(b, 0) + (n < k)

    def observe_costs(self, k: int, draft_seconds: float, verify_seconds: float) -> None:
        """``draft_seconds``: the step's k draft calls; ``verify_seconds``: the rest of the step."""
        if k > 0:  # (a step where nobody drafts, at the budget's end, is a plain target step: not timed)
            self.draft_times.setdefault(self.batch, []).append(draft_seconds / k)
            self.verify_times.setdefault((self.batch, k), []).append(verify_seconds)


def parse_draft_length(text: str):
    """A draft length as written on a command line: digits -> int, anything else stays a name; ``ValueError``
    for one that ``make_policy`` refuses, so that a command line can say so before it loads anything."""
    draft_length = int(text) if text.isdecimal() else text  # (isdigit would take '²', which int() refuses)
    make_policy(draft_length)
    return draft_length


def make_policy(draft_length) -> DraftLengthPolicy:
    """An int -> fixed, 'dynamic' -> BASS Algorithm 1, 'per-sequence' -> per-sequence Algorithm 1,
    'auto' -> cost-aware, else a policy object."""
    if isinstance(draft_length, str):
        if draft_length == "dynamic":
            return BassDynamicDraftLength()
        if draft_length == "per-sequence":
            return PerSequenceDynamicDraftLength()
        if draft_length == "auto":
            return CostAwareDraftLength()
        raise ValueError(f"draft_length must be an int >= 1, 'dynamic', 'per-sequence', 'auto' or a policy "
                         f"object; got {draft_length!r}")
    if isinstance(draft_length, type):
        raise ValueError(f"draft_length takes a policy object, not its class: pass {draft_length.__name__}(), "
                         f"not {draft_length.__name__}")
    if hasattr(draft_length, "lengths") and hasattr(draft_length, "update"):
        return draft_length
    return FixedDraftLength(draft_length)
