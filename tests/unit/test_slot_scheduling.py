"""The xdist scheduler of ``tests/support/scheduling.py``, driven as xdist's controller drives it.

Simulated workers run their tests one at a time in a chosen order of completions; the checks are the
scheduler's promises: every test runs exactly once, a serial group stays on one worker, no more workers than
slots are on CPU work at any moment, waiting groups start first, and every worker is shut down at the end (a
worker left without a shutdown hangs the run).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from tests.support.scheduling import SlotScheduling

GROUP_OF = {"test_slurm_a": "slurm", "test_slurm_b": "slurm", "test_pod": "sshd", "test_sandbox": "sandbox"}
WAITING = frozenset({"slurm", "sshd"})


class Worker:
    """What the scheduler sees of an xdist worker: it is sent test indices and, at the end, a shutdown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.queue: list[int] = []
        self.shutting_down = False
        self.ran: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down, f"{self.name} got work after its shutdown"
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def can_run(self) -> bool:
        """An xdist worker runs its next test once it holds the one after it, or a shutdown."""
        return len(self.queue) >= 2 or (len(self.queue) == 1 and self.shutting_down)


def _collection() -> list[str]:
    ids = [f"tests/integration/test_train_{i}.py::test_it" for i in range(6)]
    ids += [f"tests/integration/test_slurm_a.py::test_{i}" for i in range(4)]
    ids += [f"tests/integration/test_pod.py::test_{i}" for i in range(3)]
    ids += [f"tests/integration/test_slurm_b.py::test_{i}" for i in range(2)]
    ids += [f"tests/security/test_sandbox.py::test_{i}" for i in range(8)]  # the biggest unit
    ids += [f"tests/unit/test_u{i}.py::test_it" for i in range(20)]
    return ids


def _run(workers: int, slots: int, seed: int) -> tuple[dict[str, Worker], list[int]]:
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None)
    sched = SlotScheduling(config, log=None, group_of=GROUP_OF, waiting=WAITING, slots=slots)
    collection = _collection()
    nodes = {f"gw{i}": Worker(f"gw{i}") for i in range(workers)}
    for node in nodes.values():
        sched.add_node(node)
    for node in nodes.values():
        sched.add_node_collection(node, collection)
    sched.schedule()
    cpu_busy: list[int] = []
    rng = random.Random(seed)
    for _ in range(10_000):
        runnable = [n for n in nodes.values() if n.can_run()]
        if not runnable:
            break
        node = rng.choice(runnable)
        index = node.queue.pop(0)
        node.ran.append(collection[index])
        sched.mark_test_complete(node, index)
        cpu_busy.append(sum(1 for n in nodes.values() if sched._runs_cpu_work(n)))
    return nodes, cpu_busy


@pytest.mark.parametrize("seed", range(20))
def test_every_test_once_groups_together_cpu_work_within_the_slots_and_every_worker_ends(seed: int) -> None:
    nodes, cpu_busy = _run(workers=4, slots=2, seed=seed)
    ran = [test for node in nodes.values() for test in node.ran]
    assert sorted(ran) == sorted(_collection())
    for stem in ("test_slurm_", "test_pod", "test_sandbox"):
        holders = {n.name for n in nodes.values() if any(stem in t for t in n.ran)}
        assert len(holders) == 1, (stem, holders)
    slurm = next(n for n in nodes.values() if any("test_slurm_a" in t for t in n.ran))
    assert any("test_slurm_b" in t for t in slurm.ran)  # one group across its two modules
    assert max(cpu_busy) <= 2
    assert all(node.shutting_down and not node.queue for node in nodes.values())


def _first_units(nodes: dict[str, Worker]) -> list[str]:
    return sorted(GROUP_OF.get(node.ran[0].split("::")[0].rsplit("/", 1)[-1][:-3], "cpu")
                  for node in nodes.values() if node.ran)


def test_waiting_groups_start_first_beside_two_cpu_workers() -> None:
    nodes, _ = _run(workers=4, slots=2, seed=0)
    firsts = _first_units(nodes)
    assert firsts[-2:] == ["slurm", "sshd"] and all(f not in WAITING for f in firsts[:2])


def test_the_waiting_groups_go_before_a_bigger_cpu_unit() -> None:
    """Two workers, one core: both start on the waiting groups, not on the (bigger) sandbox suite."""
    nodes, _ = _run(workers=2, slots=1, seed=0)
    assert _first_units(nodes) == ["slurm", "sshd"]


def test_with_no_more_workers_than_slots_every_worker_takes_work() -> None:
    nodes, cpu_busy = _run(workers=2, slots=2, seed=3)
    assert all(node.ran for node in nodes.values())
    assert max(cpu_busy) == 2
