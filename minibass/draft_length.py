"""How many tokens the draft proposes at each step: fixed, BASS's dynamic heuristic, or per sequence.

A policy answers ``lengths(active)`` before a step (one draft length per active sequence) and
hears ``update(active, proposed, accepted)`` after it. The loop may propose fewer tokens than
asked near a sequence's budget (never past ``max_new_tokens``); ``proposed`` says what was used.
Any object with these two methods can be passed as ``draft_length``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol


class DraftLengthPolicy(Protocol):
    def lengths(self, active: list[int]) -> list[int]: ...

    def update(self, active: list[int], proposed: list[int], accepted: list[int]) -> None: ...


@dataclass
class FixedDraftLength:
    """Always k tokens."""

    k: int

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"draft_length must be an int >= 1, 'dynamic', or a policy object; got {self.k!r}")

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

    def lengths(self, active):
        return [self.states.setdefault(b, BassDynamicDraftLength()).lengths([b])[0] for b in active]

    def update(self, active, proposed, accepted):
        for b, k, n in zip(active, proposed, accepted):
            self.states[b].update([b], [k], [n])


def make_policy(draft_length) -> DraftLengthPolicy:
    """An int -> fixed, 'dynamic' -> BASS Algorithm 1, 'per-sequence' -> per-sequence Algorithm 1, else a policy."""
    if isinstance(draft_length, str):
        if draft_length == "dynamic":
            return BassDynamicDraftLength()
        if draft_length == "per-sequence":
            return PerSequenceDynamicDraftLength()
        raise ValueError(f"draft_length must be an int >= 1, 'dynamic', 'per-sequence' or a policy; got {draft_length!r}")
    if hasattr(draft_length, "lengths") and hasattr(draft_length, "update"):
        return draft_length
    return FixedDraftLength(draft_length)
