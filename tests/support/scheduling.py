"""How ``pytest -n N --dist loadgroup`` hands tests to workers: serial groups, and no more CPU work than cores.

Two groups of integration tests mostly wait: the Slurm testbed's (jobs queue, get signalled, requeue: ~660 s
of wall time for ~20 CPU-s in pytest's processes, the rest Slurm's timers and short jobs) and the RunPod fake's
(a pod that boots, stalls, is cut off: ~600 s of wall time for ~120 CPU-s). Everything else is CPU-bound
(two-rank trainings, model exports). With two workers on two cores, both workers sat in the waiting groups for
the suite's first ten minutes while the trainings queued behind them: CI used ~60 % of its two cores
(benchmarks/RESULTS.md, #26). With a third worker, the waiting groups overlapped the trainings, but once they
were done three workers ran trainings on two cores and the oversubscribed gloo ranks spent 5 more CPU-minutes
than the same work one pair at a time.

So a worker runs a *waiting* group beside the CPU work, and CPU work (every other unit) runs on at most
``cpu_slots`` workers at once (the cores this process may use): `scripts/check` asks for four workers, two for
the waiting groups and two for the rest. A worker whose group is done, when every slot is taken, retires.
With no more workers than slots this is xdist's own ``loadgroup`` scheduling.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from xdist.scheduler import LoadScopeScheduling


def cpu_slots() -> int:
    """The cores this process may run on (the CI machine: 2)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class SlotScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """``loadscope`` with named groups of test modules, and at most ``slots`` workers on CPU work.

    ``group_of`` maps a module's stem to its group (one unit of work, one worker, file order); ``waiting``
    names the groups that mostly wait and so run beside the CPU slots. Waiting groups are handed out first.
    """

    def __init__(self, config: Any, log: Any, *, group_of: Mapping[str, str], waiting: frozenset[str],
                 slots: int) -> None:
        super().__init__(config, log)
        self._group_of = dict(group_of)
        self._waiting = waiting
        self._slots = max(1, slots)

    def _split_scope(self, nodeid: str) -> str:
        stem = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        return self._group_of.get(stem, nodeid)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a worker joined late: as xdist does, offer it work
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        # waiting groups first, so that workers start on them; then xdist's order (bigger units first, then
        # collection order: the integration tests' trainings before the unit tests, which fill the tail)
        for scope, unit in sorted(units.items(), key=lambda kv: (kv[0] not in self._waiting, -len(kv[1]))):
            self.workqueue[scope] = unit
        for _ in range(2):  # a worker runs an item once it holds the next one (or a shutdown)
            for node in self.nodes:
                self._reschedule(node)

    def _runs_cpu_work(self, node: Any) -> bool:
        return any(scope not in self._waiting and not all(done.values())
                   for scope, done in self.assigned_work.get(node, {}).items())

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        next_scope = next(iter(self.workqueue))
        if next_scope not in self._waiting and not self._runs_cpu_work(node):
            busy = sum(1 for other in self.nodes if other is not node and self._runs_cpu_work(other))
            if busy >= self._slots:
                node.shutdown()  # runs what it holds (a worker needs the next item or a shutdown to go on)
                return
        self._assign_work_unit(node)
