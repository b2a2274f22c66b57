"""Which queries of the batches read ahead need the k models' votes (issue 47: a query the gate will
not use costs no model evaluation).

The answer loop reads its batches a few ahead of the coordinator (public: the driver's own read) and
plans each one before asking for any vote:

* a query already in the session's index of answered and abstained queries
  (:class:`pcqr.pipeline.public_log.answered.AnsweredIndex`) gets that outcome: no vote;
* a query equal to a fresh query of a batch ahead of it, still in flight, is *carried*: when its own
  batch is released that query is settled (in the index, or refused, since a gate refuses only once
  it can test nothing more), so it is looked up again then and never voted on;
* of the rest, only each key's first row in the batch is fresh (its copies get its outcome), and only
  as many fresh queries as the gate can still test are voted on: its capacity
  (:attr:`pcqr.pipeline.gates.gate.Gate.capacity`: m minus the queries tested, 0 after the halt)
  less the fresh queries of the batches ahead, and, in universal mode, none at or past the switch.

So a gate never tests more than the voted prefix of a batch's fresh queries: the answer loop checks
that before and after every release (an internal error otherwise, before anything is committed).
Everything here is computed from public values (the queries, the log's outcomes, the gate's public
counts), so which queries are voted on reveals nothing; the votes go to the coordinator only.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
from distributed import Client, Future

from pcqr.pipeline.public_log.answered import AnsweredIndex, compared, key_order, origins
from pcqr.pipeline.session.query_batches import Batch, count_votes

#: The fewest rows a vote task is given when a batch's fresh queries are split among the workers'
#: threads (smaller pieces cost more in scheduling than they save).
PIECE_ROWS = 4096


@dataclass
class Planned:
    """One batch read ahead and planned: which of its rows the index knew, which are carried, which
    were voted on (a prefix of its fresh queries) and the vote tasks."""

    batch: Batch
    found: np.ndarray  # bool: in the index when planned
    outcome: np.ndarray  # int8: their outcome (class 0 .. c - 1, or the index's abstained)
    carried: np.ndarray  # bool: equal to a fresh query of a batch ahead, looked up again when released
    origin: np.ndarray  # int64: each row's first row of the same key in the batch (itself for a first)
    fresh: int  # the batch's fresh queries (first of their key, in neither of the above)
    voted: np.ndarray  # the positions of the rows voted on
    pieces: list[np.ndarray] = field(default_factory=list)  # the voted positions, one array per vote task
    futures: list[Future] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return self.batch.table.num_rows

    def votes(self, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """ct(1) of every row (over c > 2 ``classes``, the (rows, c) counts; 0 where not voted on) and the
        mask of the rows voted on: the tasks' results, in order."""
        values = np.zeros(self.rows if classes == 2 else (self.rows, classes), dtype=np.int32)
        mask = np.zeros(self.rows, dtype=bool)
        for piece, future in zip(self.pieces, self.futures):
            values[piece] = future.result()
            mask[piece] = True
        return values, mask

    def settled(self, index: AnsweredIndex) -> tuple[np.ndarray, np.ndarray]:
        """(found, outcome) of every row as the index holds it now: its carried rows looked up again
        (the batches ahead of it are in the index by now)."""
        found, outcome = self.found.copy(), self.outcome.copy()
        carried = np.flatnonzero(self.carried)
        if carried.size:
            found[carried], outcome[carried] = index.lookup(self.batch.keys[carried])
        return found, outcome


class VoteDemand:
    """Plans the batches in flight, in stream order (:meth:`plan`), and forgets each once the
    coordinator has released it (:meth:`released`)."""

    def __init__(self, client: Client, shared: Future | None, threads: int, index: AnsweredIndex) -> None:
        self.client, self.shared, self.threads, self.index = client, shared, max(1, threads), index
        self._ahead: deque[np.ndarray] = deque()  # per planned batch: its fresh queries' compared keys, sorted
        self.fresh_ahead = 0  # fresh queries of the planned batches not yet released
        self.rows_ahead = 0  # rows of the planned batches not yet released
        self.voted = 0  # queries voted on so far

    def plan(self, batch: Batch, capacity: int, before_switch: int | None = None) -> Planned:
        """Plan ``batch``, read after every batch planned so far. ``capacity``: the gate's now;
        ``before_switch``: universal mode, the stream's rows still to pass through the coordinator
        (counted from the first batch not yet released), None otherwise."""
        keys = batch.keys
        classes = self.index.classes  # the index's layout: which key bits make one query
        order = key_order(keys, classes)  # one sort: the index's lookup and the batch's copies
        found, outcome = self.index.lookup(keys, order)
        carried = np.zeros(keys.shape[0], dtype=bool)
        ranked = compared(keys, classes)
        needles = ranked[order]  # sorted: the searches walk each array in order
        for ahead in self._ahead:  # each sorted: a batch ahead's fresh keys
            if ahead.size:
                carried[order] |= ahead[np.minimum(np.searchsorted(ahead, needles), ahead.size - 1)] == needles
        carried &= ~found
        origin = origins(keys, order, classes)  # rows of one key are alike: all found, all carried, or neither
        firsts = np.flatnonzero(~found & ~carried & (origin == np.arange(keys.shape[0])))
        room = max(0, capacity - self.fresh_ahead)
        if before_switch is not None:  # the rows at or past the switch are h_priv's
            room = min(room, int(np.searchsorted(firsts, max(0, before_switch - self.rows_ahead))))
        voted = firsts[:room] if self.shared is not None else firsts[:0]  # none after universal's switch
        self._ahead.append(np.sort(ranked[firsts]))
        self.fresh_ahead += firsts.size
        self.rows_ahead += batch.table.num_rows
        planned = Planned(batch, found, outcome, carried, origin, int(firsts.size), voted)
        if voted.size:
            pieces = max(1, min(self.threads, voted.size // PIECE_ROWS))
            X = batch.matrix(_rows(voted))  # the fresh rows only (public queries), split among the threads
            planned.pieces = np.array_split(voted, pieces)
            planned.futures = [self.client.submit(count_votes, self.shared, rows, pure=False)
                               for rows in np.array_split(X, pieces)]
            self.voted += int(voted.size)
        return planned

    def released(self, planned: Planned) -> None:
        """``planned``, the oldest batch in flight, has been released."""
        self.fresh_ahead -= planned.fresh
        self.rows_ahead -= planned.rows
        self._ahead.popleft()

    def cancel(self, planned: Planned) -> None:
        """The gate halted: ``planned``'s votes will not be read (its queries are refused)."""
        if planned.futures:
            self.client.cancel(planned.futures)
            self.voted -= int(planned.voted.size)
            planned.futures, planned.pieces, planned.voted = [], [], planned.voted[:0]


def _rows(positions: np.ndarray) -> np.ndarray | slice:
    """Ascending row positions, as a slice when they are consecutive (no index array to gather by)."""
    if positions.size and int(positions[-1]) - int(positions[0]) + 1 == positions.size:
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return positions
