"""A bounded pool: at most ``workers`` programs run at once, each (when the trainer is root) under its own uid.

Each slot owns one uid, so ``RLIMIT_NPROC`` (counted per uid) limits one program, not all of them, and a
fork bomb in one slot cannot starve its neighbours. Slots of different pools (two trainer ranks) get
different uid ranges, derived from the pool's process id. In a user namespace the count is per namespace,
so the trainer's own uid serves every slot.

The isolation is chosen when the pool is made (``probe.require_isolation``): a pool on a machine where
only weak isolation is possible refuses to exist unless weak isolation was explicitly allowed.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gputrain.errors import SandboxError
from gputrain.train.sandbox.config import SandboxLimits
from gputrain.train.sandbox.judge import ProgramResult, TestOutcome, run_tests
from gputrain.train.sandbox.probe import require_isolation
from gputrain.train.sandbox.process import Isolation

UID_BASE = 200_000
SLOTS_PER_POOL = 64


@dataclass(frozen=True)
class Job:
    """One program and the tests to run against it."""

    program: str
    tests: Sequence[str]
    setup_code: str = ""
    judge_prelude: str = ""
    entry_point: str = ""
    """The function the tests call: always the program's, even when it is named like a builtin."""


@dataclass
class SandboxPool:
    workers: int = 4
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    allow_weak: bool | None = None
    """None: ``GPUTRAIN_SANDBOX_ALLOW_WEAK`` decides."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        choice = require_isolation(self.allow_weak)
        self.isolation = choice.isolation
        self.level = self.isolation.level
        base = UID_BASE + (os.getpid() % 4096) * SLOTS_PER_POOL
        count = min(self.workers, SLOTS_PER_POOL)
        self.uids = tuple(base + slot for slot in range(count)) if self.isolation.uid is not None else ()
        self._slots: queue.Queue[int | None] = queue.Queue()
        for uid in self.uids or [None] * count:
            self._slots.put(uid)

    def describe(self) -> dict[str, object]:
        """What goes into the run's log and ``result.json``."""
        return self.isolation.describe()

    def _isolation(self, uid: int | None) -> Isolation:
        if uid is None:
            return self.isolation
        return dataclasses.replace(self.isolation, uid=uid, gid=uid)

    def run(self, job: Job) -> ProgramResult:
        """One program's result. Whatever its bytes make go wrong costs that program only: an error other
        than a sandbox that could not be built (:class:`SandboxError`, which stops the run) becomes a crash
        of each of its tests, never an exception out of the batch."""
        uid = self._slots.get()
        try:
            return run_tests(
                job.program, list(job.tests), setup_code=job.setup_code, judge_prelude=job.judge_prelude,
                entry_point=job.entry_point, limits=self.limits, isolation=self._isolation(uid),
            )
        except SandboxError:
            raise
        except Exception as exc:
            reason = f"scoring failed: {type(exc).__name__}: {exc}"[:300]
            warnings.warn(f"sandbox: {reason}", RuntimeWarning, stacklevel=1)
            return ProgramResult(tuple(TestOutcome(t, "crashed", reason) for t in job.tests),
                                 isolation=self.isolation.level)
        finally:
            self._slots.put(uid)

    def map(self, jobs: Sequence[Job]) -> list[ProgramResult]:
        """Results in the order of ``jobs``."""
        if len(jobs) <= 1 or self.workers == 1:
            return [self.run(j) for j in jobs]
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox") as ex:
            return list(ex.map(self.run, jobs))
