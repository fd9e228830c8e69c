"""A bounded pool: at most ``workers`` programs run at once, each under its own uid.

Each slot owns one uid, so ``RLIMIT_NPROC`` (counted per uid) limits one program, not all of them, and a
fork bomb in one slot cannot starve its neighbours. Slots of different pools (two trainer ranks) get
different uid ranges, derived from the pool's process id.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gputrain.train.sandbox.config import SandboxLimits, default_hidden_paths, isolation_level
from gputrain.train.sandbox.judge import ProgramResult, run_tests
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


@dataclass
class SandboxPool:
    workers: int = 4
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    hide_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        self.level = isolation_level()
        extra = {os.path.abspath(p) for p in self.hide_paths}
        self._hide = tuple(sorted(set(default_hidden_paths()) | extra))
        base = UID_BASE + (os.getpid() % 4096) * SLOTS_PER_POOL
        self.uids = tuple(base + slot for slot in range(min(self.workers, SLOTS_PER_POOL)))
        self._slots: queue.Queue[int] = queue.Queue()
        for uid in self.uids:
            self._slots.put(uid)

    def _isolation(self, uid: int) -> Isolation:
        if self.level == "rlimits":
            return Isolation("rlimits", None, None, ())
        return Isolation(self.level, uid, uid, self._hide)

    def run(self, job: Job) -> ProgramResult:
        uid = self._slots.get()
        try:
            return run_tests(
                job.program, list(job.tests), setup_code=job.setup_code, judge_prelude=job.judge_prelude,
                limits=self.limits, isolation=self._isolation(uid),
            )
        finally:
            self._slots.put(uid)

    def map(self, jobs: Sequence[Job]) -> list[ProgramResult]:
        """Results in the order of ``jobs``."""
        if len(jobs) <= 1 or self.workers == 1:
            return [self.run(j) for j in jobs]
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox") as ex:
            return list(ex.map(self.run, jobs))
