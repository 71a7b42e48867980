"""What the sidecar says back: :class:`Outcome` (its word on the reclaim after ``bye``), the
things it :class:`Left`, and the errors this package raises (:class:`SandguardError`,
:class:`ReclaimIncomplete`).

The outcome line is the sidecar's (src/protocol/outcome.rs); :meth:`Outcome.parse` reads it
and nothing else does.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional


class SandguardError(RuntimeError):
    """The sidecar could not be started, or is gone."""


class Left(NamedTuple):
    """One thing the reclaim after ``bye`` left behind."""

    provider: str
    #: The sandbox's id, or ``*`` for a provider that could not be listed.
    id: str
    reason: str


class Outcome:
    """How the reclaim after ``bye`` went, as the sidecar said it (``close()`` returns it).

    Attributes:
        state: ``"clean"`` (everything still owned is gone), ``"left"`` (see ``left``), or
            ``"unknown"``: the sidecar said nothing (it was gone already, ``wait=None``, or the
            wait timed out).
        left: what could not be removed, at most 16 named (``count`` counts them all).
        count: how many things were left.
    """

    def __init__(self, state: str, left: Optional[List[Left]] = None, count: int = 0,
                 detail: str = "") -> None:
        self.state = state
        self.left = list(left or [])
        self.count = count
        self.detail = detail

    @property
    def clean(self) -> bool:
        return self.state == "clean"

    @classmethod
    def parse(cls, line: str) -> Optional["Outcome"]:
        """The sidecar's line (src/protocol/outcome.rs); ``None`` when it is not one."""
        line = line.strip()
        if line == "ended clean":
            return cls("clean")
        if not line.startswith("ended left "):
            return None
        count, sep, items = line[len("ended left "):].partition(":")
        if not sep or not count.isdigit():
            return None
        left = []
        for item in filter(None, (i.strip() for i in items.split(";"))):
            who, _, reason = item.partition(" ")
            provider, slash, sid = who.partition("/")
            if not slash:
                return None
            left.append(Left(provider, sid, reason))
        return cls("left", left, int(count))

    def check(self) -> "Outcome":
        """Raise :class:`ReclaimIncomplete` when something was left; else return self."""
        if self.state == "left":
            raise ReclaimIncomplete(self)
        return self

    def __str__(self) -> str:
        if self.state == "left":
            named = "; ".join(f"{l.provider}/{l.id} {l.reason}" for l in self.left)
            return f"left {self.count}: {named}"
        return self.state + (f" ({self.detail})" if self.detail else "")

    def __repr__(self) -> str:
        return f"<sandguard.Outcome {self}>"


class ReclaimIncomplete(SandguardError):
    """The reclaim after ``bye`` left something behind (``guard(strict=True)``, or
    :meth:`Outcome.check`). ``.outcome`` says what; ``sandguard sweep`` retries."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"the reclaim after bye left something behind: {outcome}")
        self.outcome = outcome

