"""Run a program's tests with the verdict taken outside the program's reach.

Each test (an ``assert ...`` line, or HumanEval's ``check(candidate)`` code) is executed HERE, in the
parent, in a fresh namespace where the program's callables are proxies (never under a builtin's name
or a judge-side helper's): calling one sends the arguments to the sandboxed program and brings back the
return value as plain data (int, str, list, ...; other objects come back as opaque handles that can be
passed back or have methods called, but never compare equal or test true). The program never sees the
test, the expected value or the verdict, so ``sys.exit(0)``, patched builtins/``AssertionError``,
``os._exit`` or a printed "OK" cannot fake a pass.
"""

from __future__ import annotations

import ast
import builtins
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from gputrain.train.sandbox.config import SandboxLimits
from gputrain.train.sandbox.process import Isolation, SandboxDied, SandboxProcess, SandboxTimeout
from gputrain.train.sandbox.runner import decode, encode

Status = Literal["passed", "failed", "timed_out", "crashed"]


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


class ProgramRaised(Exception):
    """The program's function raised; the test fails (a test may also expect this and catch it)."""


@functools.lru_cache(maxsize=64)
def _raised_type(name: str) -> type[ProgramRaised]:
    """``ProgramRaised`` that is also the builtin exception the program raised, so a test that expects
    ``ValueError`` (``try``/``except ValueError``) sees one."""
    base = getattr(builtins, name, None)
    if isinstance(base, type) and issubclass(base, Exception) and not issubclass(base, ProgramRaised):
        try:
            return type(f"Program{name}", (ProgramRaised, base), {})
        except TypeError:
            pass
    return ProgramRaised


class RemoteHandle:
    """A non-data value living in the sandbox: usable as an argument or for method calls only."""

    def __init__(self, session: _Session, ident: int, type_name: str) -> None:
        self._session, self._ident, self._type = session, ident, type_name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: self._session.call({"method": name, "handle": self._ident}, a, k)

    def __bool__(self) -> bool:
        raise TypeError(f"truth value of a sandboxed {self._type} object is not trusted")

    def __eq__(self, other: object) -> bool:
        raise TypeError(f"sandboxed {self._type} objects do not compare")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<sandboxed {self._type}>"


class Proxy:
    def __init__(self, session: _Session, name: str) -> None:
        self._session, self._name = session, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call({"name": self._name}, args, kwargs)

    def __repr__(self) -> str:
        return f"<sandboxed function {self._name}>"


class _Session:
    def __init__(self, proc: SandboxProcess, deadline: float) -> None:
        self.proc, self.deadline = proc, deadline

    def _opaque(self, value: Any) -> Any:
        if isinstance(value, Proxy) and value._session is self:
            return {"r": value._name}
        if isinstance(value, RemoteHandle) and value._session is self:
            return {"h": [value._ident, value._type]}
        raise TypeError(f"cannot pass a {type(value).__name__} into the sandbox")

    def _resolve(self, tag: str, body: Any) -> Any:
        if tag == "h" and isinstance(body, list) and len(body) == 2 and type(body[0]) is int:
            return RemoteHandle(self, body[0], str(body[1])[:80])
        raise ValueError("unexpected reference in a reply")

    def call(self, head: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = {**head, "args": encode(list(args), self._opaque), "kwargs": encode(kwargs, self._opaque)}
        timeout = min(self.proc.limits.test_seconds, self.deadline - time.monotonic())
        if timeout <= 0:
            raise SandboxTimeout("program time budget used up")
        reply = self.proc.call(request, timeout)
        if "error" in reply:
            raise _raised_type(str(reply.get("type", "")))(str(reply["error"])[:300])
        try:
            return decode(reply.get("value"), self._resolve)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ProgramRaised(f"unreadable return value: {exc}") from exc


@functools.lru_cache(maxsize=256)
def _prelude_stubs(prelude: str) -> frozenset[str]:
    """Functions the prelude only declares (no ``return``/``yield``: a docstring, maybe an import): the
    program supplies them.

    HumanEval's prompt ends with the entry point's signature and docstring; its other functions (``poly``,
    ``encode_cyclic``) are helpers that ``check`` relies on and must stay the judge's own.
    """
    try:
        tree = ast.parse(prelude)
    except SyntaxError:
        return frozenset()
    returns = (ast.Return, ast.Yield, ast.YieldFrom)
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not any(isinstance(inner, returns) for stmt in node.body for inner in ast.walk(stmt))
    )


def _proxied(names: list[str], prelude_names: set[str], prelude: str) -> list[str]:
    """The program's callables the test may reach. Never a builtin's name (a program defining ``set`` or
    ``sorted`` would otherwise decide both sides of ``assert set(f(x)) == set(y)``), never a prelude helper."""
    stubs = _prelude_stubs(prelude)
    return [
        n for n in names
        if not hasattr(builtins, n) and (n not in prelude_names or n in stubs)
    ]


def _run_one(test: str, session: _Session, names: list[str], setup_code: str, prelude: str) -> TestOutcome:
    namespace: dict[str, Any] = {"__name__": "__judge__"}
    try:
        exec(compile(setup_code, "<setup>", "exec"), namespace)
        before = set(namespace)
        exec(compile(prelude, "<prelude>", "exec"), namespace)
    except Exception as exc:
        return TestOutcome(test, "crashed", f"test setup failed: {type(exc).__name__}: {exc}")
    for name in _proxied(names, set(namespace) - before, prelude):
        namespace[name] = Proxy(session, name)
    try:
        exec(compile(test, "<test>", "exec"), namespace)
    except AssertionError:
        return TestOutcome(test, "failed", "assertion failed")
    except ProgramRaised as exc:
        return TestOutcome(test, "failed", f"program raised {exc}")
    except SandboxTimeout as exc:
        return TestOutcome(test, "timed_out", str(exc))
    except SandboxDied as exc:
        return TestOutcome(test, "crashed", str(exc))
    except Exception as exc:
        return TestOutcome(test, "failed", f"{type(exc).__name__}: {str(exc)[:200]}")
    return TestOutcome(test, "passed")


def run_tests(
    program: str,
    tests: list[str],
    *,
    setup_code: str = "",
    judge_prelude: str = "",
    limits: SandboxLimits | None = None,
    isolation: Isolation,
) -> ProgramResult:
    """Run ``program`` once, then each test against it; a test that kills or hangs the program gets a
    fresh copy for the following tests (within the program's wall budget)."""
    limits = limits or SandboxLimits()
    started = time.monotonic()
    deadline = started + limits.wall_seconds
    outcomes: list[TestOutcome] = []
    stdout: list[str] = []
    stderr: list[str] = []
    proc: SandboxProcess | None = None
    session: _Session | None = None
    names: list[str] = []
    try:
        for i, test in enumerate(tests):
            if proc is None:
                try:
                    proc = SandboxProcess(program, setup_code, limits, isolation)
                    names = proc.start(min(limits.test_seconds, max(0.0, deadline - time.monotonic())))
                except (SandboxDied, SandboxTimeout) as exc:
                    status: Status = "timed_out" if isinstance(exc, SandboxTimeout) else "crashed"
                    outcomes.extend(TestOutcome(t, status, str(exc)) for t in tests[i:])
                    break
                session = _Session(proc, deadline)
            assert session is not None
            outcome = _run_one(test, session, names, setup_code, judge_prelude)
            outcomes.append(outcome)
            if outcome.status in ("timed_out", "crashed"):
                proc.close()
                stdout.append(proc.output("stdout"))
                stderr.append(proc.output("stderr"))
                proc = session = None
    finally:
        if proc is not None:
            proc.close()
            stdout.append(proc.output("stdout"))
            stderr.append(proc.output("stderr"))
    return ProgramResult(
        outcomes=tuple(outcomes), stdout="".join(stdout), stderr="".join(stderr),
        isolation=isolation.level, seconds=time.monotonic() - started,
    )
