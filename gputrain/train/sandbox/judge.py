"""Run a program's tests with the verdict taken outside the program's reach, and no dataset code here.

Two sandboxed processes per program: the *program* (model-written code, plus the task's setup code it
may rely on) and the *judge* (the dataset's setup code, prelude and tests, see ``verdict.py``). The
trainer only relays: the judge asks "call f with these arguments", the trainer forwards the request to the
program and the plain-data answer back, and finally reads the judge's verdict. Neither sandbox sees the
other; the trainer executes none of their code. Every test is bounded by ``test_seconds`` and the whole
program by ``wall_seconds``; a test that kills or hangs the program gets a fresh copy for the next test.
The judge is the program's own too (started beside it, never reused): a dataset row that patches its
judge's interpreter patches nothing that judges another program.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from gputrain.errors import SandboxError
from gputrain.train.sandbox.config import SandboxLimits
from gputrain.train.sandbox.process import (
    Isolation,
    ProtocolViolation,
    SandboxDied,
    SandboxProcess,
    SandboxSetupFailed,
    SandboxTimeout,
)

Status = Literal["passed", "failed", "timed_out", "crashed"]
STATUSES = ("passed", "failed", "timed_out", "crashed")


@dataclass(frozen=True)
class TestOutcome:
    test: str
    status: Status
    reason: str = ""


@dataclass(frozen=True)
class ProgramResult:
    outcomes: tuple[TestOutcome, ...]
    stdout: str = ""
    stderr: str = ""
    isolation: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        return sum(o.status == "passed" for o in self.outcomes)

    @property
    def fraction(self) -> float:
        return self.passed / len(self.outcomes) if self.outcomes else 0.0


#: What a judge may ask of a program (the rest of its request is dropped before it is relayed).
CALL_KEYS = ("name", "method", "handle", "args", "kwargs")


class _Run:
    """The two processes of one program's run and the budget they share.

    Both are started for this program only and end with it: no state of one program's scoring (a dataset
    row that patched its judge, a program's leftovers) can reach another's."""

    def __init__(self, program: str, setup_code: str, prelude: str, limits: SandboxLimits,
                 isolation: Isolation, entry_point: str = "") -> None:
        self.program, self.setup, self.prelude, self.entry = program, setup_code, prelude, entry_point
        self.limits, self.isolation = limits, isolation
        self.deadline = time.monotonic() + limits.wall_seconds
        self.proc: SandboxProcess | None = None
        self.judge: SandboxProcess | None = None
        self.judge_ready = False
        self.names: list[str] = []
        self.stdout: list[str] = []
        self.stderr: list[str] = []

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _spawn_judge(self) -> None:
        if self.judge is None:
            self.judge = SandboxProcess("judge", {"setup": "", "prelude": ""}, self.limits, self.isolation)
            self.judge_ready = False

    def ensure_program(self) -> None:
        self._spawn_judge()  # first, so both processes boot at the same time
        if self.proc is None:
            self.proc = SandboxProcess("program", {"program": self.program, "setup": self.setup}, self.limits,
                                       self.isolation)
            # Start-up (interpreter, confinement, module-level code) counts against the wall budget only.
            names = self.proc.start(self.left()).get("names")
            self.names = [n for n in names if isinstance(n, str) and n.isidentifier()][:1000] \
                if isinstance(names, list) else []

    def ensure_judge(self) -> SandboxProcess:
        self._spawn_judge()
        assert self.judge is not None
        if not self.judge_ready:
            self.judge.start(self.left())
            self.judge_ready = True
        return self.judge

    def drop_program(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.stdout.append(self.proc.output("stdout"))
            self.stderr.append(self.proc.output("stderr"))
            self.proc = None

    def drop_judge(self) -> None:
        if self.judge is not None:
            self.judge.close()
        self.judge, self.judge_ready = None, False

    def relay(self, request: Any, test_deadline: float) -> dict[str, Any]:
        """One call from the judge to the program. What goes back is built here: the program's checked
        value or exception, or (from the trainer only) that the program is gone."""
        if self.proc is None:
            return {"gone": "crashed", "reason": "program is gone"}
        timeout = min(self.limits.test_seconds, test_deadline - time.monotonic(), self.left())
        if timeout <= 0 or not isinstance(request, dict):
            self.drop_program()
            return {"gone": "timed_out", "reason": "program time budget used up"}
        try:
            return self.proc.call({k: request[k] for k in CALL_KEYS if k in request}, timeout)
        except SandboxTimeout as exc:
            self.drop_program()
            return {"gone": "timed_out", "reason": str(exc)}
        except ProtocolViolation as exc:
            self.drop_program()
            return {"gone": "crashed", "reason": f"protocol violation: {exc}"}
        except SandboxDied as exc:
            self.drop_program()
            return {"gone": "crashed", "reason": str(exc)}

    def run_test(self, test: str) -> TestOutcome:
        budget = min(self.limits.test_seconds, self.left())
        test_deadline = time.monotonic() + budget
        try:
            judge = self.ensure_judge()
            judge.send({"test": test, "names": self.names, "setup": self.setup, "prelude": self.prelude,
                        "entry": self.entry},
                       max(0.0, test_deadline - time.monotonic()) + 0.05)
            gone: dict[str, Any] | None = None
            while True:
                msg = judge.receive(max(0.0, test_deadline - time.monotonic()) + 0.05)
                if set(msg) == {"call"}:
                    reply = self.relay(msg["call"], test_deadline)
                    gone = gone or (reply if "gone" in reply else None)
                    judge.send(reply, max(0.0, test_deadline - time.monotonic()) + 0.05)
                    continue
                status, reason = _verdict(msg)
                if gone is not None:  # only the trainer says a program is gone, and no test may swallow that
                    # (a bare ``except:`` around the call would otherwise turn a crash or a timeout into a pass)
                    status, reason = gone["gone"], str(gone.get("reason", ""))
                return TestOutcome(test, status, reason)
        except SandboxTimeout:
            self.drop_judge()
            self.drop_program()  # it may be stuck in the call the judge was waiting for
            return TestOutcome(test, "timed_out", f"test did not finish within {budget:.1f}s")
        except SandboxDied as exc:
            self.drop_judge()
            return TestOutcome(test, "crashed", f"test code died: {exc}")

    def close(self) -> None:
        self.drop_program()
        self.drop_judge()


def _verdict(msg: dict[str, Any]) -> tuple[Status, str]:
    raw = msg.get("verdict")
    if set(msg) == {"verdict"} and isinstance(raw, list) and len(raw) == 2 and raw[0] in STATUSES:
        return raw[0], str(raw[1])[:400]
    raise ProtocolViolation("garbled verdict from the judge")


def run_tests(
    program: str,
    tests: list[str],
    *,
    setup_code: str = "",
    judge_prelude: str = "",
    entry_point: str = "",
    limits: SandboxLimits | None = None,
    isolation: Isolation,
) -> ProgramResult:
    """Run ``program`` once, then each test against it in a separate judge sandbox.

    ``entry_point`` names the function the tests call: the judge calls the program's under that name even
    when it is a builtin's (``sum``), where other builtin names stay the judge's own.

    Raises :class:`SandboxError` when a confinement layer fails to apply (never runs the code unconfined):
    only the child's own setup, before any untrusted code ran, can report that. Once the wall budget is
    spent the remaining tests time out at once, with nothing started for them.
    """
    limits = limits or SandboxLimits()
    started = time.monotonic()
    run = _Run(program, setup_code, judge_prelude, limits, isolation, entry_point)
    outcomes: list[TestOutcome] = []
    try:
        for i, test in enumerate(tests):
            if run.left() <= 0:
                outcomes.extend(TestOutcome(t, "timed_out", "program time budget used up") for t in tests[i:])
                break
            try:
                run.ensure_program()
            except (SandboxDied, SandboxTimeout) as exc:
                status: Status = "timed_out" if isinstance(exc, SandboxTimeout) else "crashed"
                outcomes.extend(TestOutcome(t, status, str(exc)) for t in tests[i:])
                break
            outcome = run.run_test(test)
            outcomes.append(outcome)
            if outcome.status in ("timed_out", "crashed"):
                run.drop_program()
    except SandboxSetupFailed as exc:
        raise SandboxError(str(exc)) from None
    finally:
        run.close()
    return ProgramResult(
        outcomes=tuple(outcomes), stdout="".join(run.stdout), stderr="".join(run.stderr),
        isolation=isolation.level, seconds=time.monotonic() - started,
        extra={"layers": list(isolation.layers)},
    )
