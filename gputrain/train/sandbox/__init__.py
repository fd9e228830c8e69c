"""Run model-written Python against tests, contained (stdlib only, cheap to import).

    from gputrain.train.sandbox import Job, SandboxPool
    pool = SandboxPool(workers=4)
    result = pool.run(Job("def add(a, b):\\n    return a + b", ["assert add(1, 2) == 3"]))
    result.fraction, [(o.status, o.reason) for o in result.outcomes]

See ``config.py`` for the isolation levels and ``judge.py`` for why a program cannot fake a pass.
"""

from gputrain.train.sandbox.config import SandboxLimits, isolation_level
from gputrain.train.sandbox.judge import ProgramResult, TestOutcome, run_tests
from gputrain.train.sandbox.pool import Job, SandboxPool
from gputrain.train.sandbox.process import Isolation

__all__ = [
    "Isolation",
    "Job",
    "ProgramResult",
    "SandboxLimits",
    "SandboxPool",
    "TestOutcome",
    "isolation_level",
    "run_tests",
]
