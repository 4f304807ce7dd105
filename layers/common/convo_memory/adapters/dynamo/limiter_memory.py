"""What one execution environment saw of the turn limiter's shards, and the guess it
makes from that of which form a shard's write should take (``rate_limit.py``).

A guess is never trusted for counting: a wrong one only costs a second write. So:

- a shard seen busy is busy still (``tat`` only grows): the busy form;
- an environment that looks alone on a workspace (every ``tat`` it found was the one it
  had written itself: one environment, or the local runtime's shared one) trusts what it
  saw, idle included, and a shard it never saw is idle;
- an environment among others (it found ``tat`` values it had not written: Lambda's many
  environments) guesses from the share of shards its recent writes found busy.

Both shares are running averages, each observation moving them by ``WEIGHT`` (the first
one setting them).
"""

from __future__ import annotations

import threading

# How much one observation moves a share.
WEIGHT = 0.25
# Shards and workspaces this environment remembers (then it starts over).
MAX_REMEMBERED = 10_000


class LimiterMemory:
    """One environment's memory of shards (``tat`` as last seen, by item id) and of
    workspaces (refusals it knows of, and how busy and how shared their shards are)."""

    def __init__(self, credit_us: int) -> None:
        # A shard whose tat is at least ``now - credit`` takes the busy form.
        self._credit_us = credit_us
        self._seen: dict[str, int] = {}
        self._busy: dict[str, float] = {}
        self._shared: dict[str, float] = {}
        self._refused_until: dict[str, int] = {}
        self._lock = threading.Lock()

    def known_tat(self, item: str) -> int | None:
        with self._lock:
            return self._seen.get(item)

    def refused_until(self, workspace_id: str) -> int:
        """Until when (microseconds) this environment knows the workspace to be full."""
        with self._lock:
            return self._refused_until.get(workspace_id, 0)

    def note_refusal(self, workspace_id: str, until_us: int) -> None:
        with self._lock:
            self._refused_until[workspace_id] = max(
                self._refused_until.get(workspace_id, 0), until_us
            )

    def guess_busy(self, workspace_id: str, item: str, now_us: int) -> bool:
        """Whether shard ``item`` of ``workspace_id`` most likely takes the busy form."""
        floor = now_us - self._credit_us
        with self._lock:
            seen = self._seen.get(item)
            if seen is not None and seen >= floor:
                return True
            if self._shared.get(workspace_id, 0.0) < 0.5:
                return False  # alone: idle as seen, or never written
            return self._busy.get(workspace_id, 0.0) >= 0.5

    def observe(
        self,
        workspace_id: str,
        item: str,
        now_us: int,
        before: int | None,
        after: int | None,
        *,
        known_before: bool = True,
        learn: bool = True,
    ) -> None:
        """A write found ``before`` on the shard (None: no ``tat``; ``known_before``
        False: only that it was idle) and left ``after`` (``learn`` False: the shares
        stay as they are, the write only confirming what the one before it found)."""
        with self._lock:
            if item not in self._seen and len(self._seen) >= MAX_REMEMBERED:
                self._seen.clear()
                self._busy.clear()
                self._shared.clear()
                self._refused_until.clear()
            mine = self._seen.get(item)
            if learn:
                floor = now_us - self._credit_us
                _move(self._busy, workspace_id, known_before and (before or 0) >= floor)
            if learn and known_before:
                others = before is not None and (mine is None or before > mine)
                _move(self._shared, workspace_id, others)
            if after is not None:
                self._seen[item] = max(mine or 0, after)


def _move(shares: dict[str, float], key: str, observed: bool) -> None:
    """A running average; its first observation is all there is to go on."""
    share = shares.get(key)
    shares[key] = float(observed) if share is None else share + WEIGHT * (observed - share)
