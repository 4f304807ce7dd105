"""How a workspace's turn limiter is spread over items of ``TurnLimitsTable``: shards
sized from the configured limit, so that no item is written by every turn.

DynamoDB writes one item at most about 1,000 times a second (one partition; adaptive
capacity cannot split an item), and the contract keeps every item under 200 writes a
second while a workspace runs at its limit. So:

- **Rate shards.** A workspace limited to ``R`` turns a second has
  ``ceil(R / TURNS_PER_SHARD)`` shards, each a GCRA counter with ``R / shards`` turns a
  second and its share of the burst. A turn picks a shard at random, so a shard takes
  about 100 writes a second at the limit, and its busiest second stays well under 200
  (Poisson: at 100 a second the busiest of 100 shards over a minute is about 140).
  Each shard's burst is at least ``MIN_SHARD_BURST``: random choice makes some shards
  busier than the mean, and a shard with room for too few turns at once would refuse
  turns while the workspace is under its limit (at 90% of the limit, Poisson arrivals,
  a shard that holds 25 turns refuses 0.08% of them, one that holds 10, 1.7%). With one
  shard (``R <= 100``, the defaults) nothing changes: the burst is exactly
  ``WorkspaceTurnBurst``.
- **Slow-turn shards.** The workspace's cap of slow turns in flight is split over
  ``slow_shards`` items (each holding 8 to 32 entries, so an item stays below 1 KB, one
  write unit), as many as the rate shards when the cap allows, so that slow turns spread
  like the rate's writes. The sum of the shards' caps is the cap: the bound is global.
  With a cap under 16 (the default is 8) there is one slow shard.
- **Items.** Shard ``k`` of both kinds lives on item ``<workspace>`` for ``k = 0`` (the
  one item of a small workspace, as before) and ``<workspace>#<k>`` otherwise; an item
  holds the rate counter and the slow set of the same ``k``.

A turn's rate-limit write goes to its shard's item. A turn still running after a second
registers on a slow shard at random, and tries a second one before it is refused.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from convo_memory.adapters.dynamo.table import string_value

# Turns a second one rate shard takes at the workspace's limit.
TURNS_PER_SHARD = 100
# The least burst of a rate shard when there are several (see the module docstring).
MIN_SHARD_BURST = 25
# Entries of a slow set: at least this many per shard when there are several, and at
# most this many (the item stays one write unit: about 18 bytes an entry).
MIN_SLOTS_PER_SHARD = 8
MAX_SLOTS_PER_SHARD = 32


def item_id(workspace_id: str, shard: int) -> str:
    """The ``id`` of the item that holds shard ``shard`` of ``workspace_id``'s limiter."""
    return workspace_id if shard == 0 else f"{workspace_id}#{shard}"


def item_key(workspace_id: str, shard: int) -> dict[str, dict[str, str]]:
    """The key of that item."""
    return {"id": string_value(item_id(workspace_id, shard))}


@dataclass(frozen=True)
class LimiterLayout:
    """The shards of every workspace's limiter, from the deployment's settings:
    ``rate`` turns a second (0: no rate limit), ``burst`` at once, and at most
    ``max_slow_turns`` slow turns in flight (0: no cap)."""

    rate: float
    burst: int
    max_slow_turns: int = 0

    @property
    def rate_shards(self) -> int:
        """Rate shards (0 with the rate limit off)."""
        return math.ceil(self.rate / TURNS_PER_SHARD) if self.rate > 0 else 0

    @property
    def shard_rate(self) -> float:
        """Turns a second one rate shard admits."""
        return self.rate / self.rate_shards

    @property
    def shard_burst(self) -> int:
        """Turns one rate shard admits at once."""
        shards = self.rate_shards
        if shards <= 1:
            return self.burst
        return max(math.ceil(self.burst / shards), MIN_SHARD_BURST)

    @property
    def slow_shards(self) -> int:
        """Slow-turn shards (0 with the cap off)."""
        cap = self.max_slow_turns
        if cap <= 0:
            return 0
        least = math.ceil(cap / MAX_SLOTS_PER_SHARD)
        most = max(least, cap // MIN_SLOTS_PER_SHARD)
        return min(max(self.rate_shards, least), most)

    def slow_cap(self, shard: int) -> int:
        """The slow turns shard ``shard`` holds at most (the shards' caps add up to the
        workspace's cap)."""
        shards = self.slow_shards
        return self.max_slow_turns // shards + (1 if shard < self.max_slow_turns % shards else 0)

    def rate_shard(self, rng: random.Random) -> int:
        """A rate shard for a turn, at random."""
        return rng.randrange(self.rate_shards) if self.rate_shards > 1 else 0

    def slow_shard_order(self, rng: random.Random) -> list[int]:
        """The slow shards a turn tries for a place, in order: one at random, then
        another (when there are several)."""
        shards = self.slow_shards
        if shards <= 1:
            return [0] if shards else []
        first, second = rng.randrange(shards), rng.randrange(shards - 1)
        return [first, second if second < first else second + 1]

    def admission_checks_slow(self, rate_shard: int) -> bool:
        """Whether admission on ``rate_shard`` also asks for room among slow turns: only
        when one set holds them all (with several, a full shard does not mean a full
        workspace; the registration at the first second decides)."""
        return self.slow_shards == 1 and rate_shard == 0
