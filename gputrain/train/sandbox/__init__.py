"""Run model-written Python against tests, contained (stdlib only, cheap to import).

    from gputrain.train.sandbox import Job, SandboxPool
    pool = SandboxPool(workers=4)            # refuses (SandboxError) where only weak isolation is possible
    result = pool.run(Job("def add(a, b):\\n    return a + b", ["assert add(1, 2) == 3"]))
    result.fraction, [(o.status, o.reason) for o in result.outcomes], pool.describe()

See ``probe.py`` for the isolation levels, ``confine.py`` for each layer and ``judge.py``/``verdict.py``
for why neither a program nor a dataset's test code can fake a pass or touch the trainer.
"""

from gputrain.train.sandbox.config import SandboxLimits
from gputrain.train.sandbox.judge import ProgramResult, TestOutcome, run_tests
from gputrain.train.sandbox.pool import Job, SandboxPool
from gputrain.train.sandbox.probe import choose_isolation, isolation_level, require_isolation
from gputrain.train.sandbox.process import Isolation

__all__ = [
    "Isolation",
    "Job",
    "ProgramResult",
    "SandboxLimits",
    "SandboxPool",
    "TestOutcome",
    "choose_isolation",
    "isolation_level",
    "require_isolation",
    "run_tests",
]
