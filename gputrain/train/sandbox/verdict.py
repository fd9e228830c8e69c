"""Judge side, run inside its own sandbox: a dataset's setup code, prelude and tests against the program.

The dataset's code is not trusted either (a poisoned MBPP row is as hostile as a model's program), so it
runs in a sandbox of its own, never in the trainer. The program lives in *another* sandbox; here its
callables are proxies (never under a builtin's name): calling one sends the arguments out through the
trainer, which forwards them to the program and brings back the return value as plain data (int, str,
list, ...; other objects come back as opaque handles that can be passed back or have methods called, but
never compare equal or test true). The program never sees the test, the expected value or the verdict, so
``sys.exit(0)``, patched builtins/``AssertionError``, ``os._exit`` or a printed "OK" cannot fake a pass.

Order matters: the proxies go into the test's namespace *first*, then the setup code runs (its helpers
replace any proxy of the same name), then the prelude (its helpers stay the judge's; its bare stubs, such
as HumanEval's entry point, are the program's). A program therefore cannot override a helper the tests use.
Stdlib only: this file's source is executed inside the sandbox.
"""

from __future__ import annotations

import _ast
import builtins

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs every sandbox start ~4 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    #: ``link(request) -> reply``: one round trip to the program through the trainer.
    Link = Callable[[dict[str, Any]], dict[str, Any]]


try:
    from gputrain.train.sandbox.codec import decode, encode
except ImportError:  # inside the sandbox, loaded from source by the runner
    from _gputrain_sbx_codec import decode, encode  # type: ignore[no-redef]

#: Exceptions a program may not "raise into" a test: they change the control flow of the test itself
#: (a StopIteration raised inside ``all(map(f, xs))`` would end the iteration and pass the assert).
NOT_MAPPED = frozenset({"StopIteration", "StopAsyncIteration", "GeneratorExit"})


class ProgramRaised(Exception):
    """The program's function raised; the test fails (a test may also expect this and catch it)."""


class ProgramGone(BaseException):
    """The program died or ran out of time during a call. BaseException: a test's ``except Exception``
    must not swallow it."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


#: One class per builtin exception name (plain dicts, not ``functools.lru_cache``: importing functools, and
#: ``ast`` below, cost each judge's start more than its tests take; #26).
_RAISED: dict[str, type[ProgramRaised]] = {}
_STUBS: dict[str, frozenset[str]] = {}


def raised_type(name: str) -> type[ProgramRaised]:
    """``ProgramRaised`` that is also the builtin exception the program raised, so a test that expects
    ``ValueError`` (``try``/``except ValueError``) sees one."""
    if name in _RAISED:
        return _RAISED[name]
    base = getattr(builtins, name, None)
    if (name not in NOT_MAPPED and isinstance(base, type) and issubclass(base, Exception)
            and not issubclass(base, ProgramRaised)):
        try:
            _RAISED[name] = type(f"Program{name}", (ProgramRaised, base), {})
            return _RAISED[name]
        except TypeError:
            pass
    return ProgramRaised


class RemoteHandle:
    """A non-data value living in the program's sandbox: usable as an argument or for method calls only."""

    def __init__(self, session: Session, ident: int, type_name: str) -> None:
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
    def __init__(self, session: Session, name: str) -> None:
        self._session, self._name = session, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call({"name": self._name}, args, kwargs)

    def __repr__(self) -> str:
        return f"<sandboxed function {self._name}>"


class Session:
    def __init__(self, link: Link) -> None:
        self.link = link

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
        reply = self.link(request)
        if "gone" in reply:
            raise ProgramGone(str(reply["gone"]), str(reply.get("reason", "")))
        if "error" in reply:
            raise raised_type(str(reply.get("type", "")))(str(reply["error"])[:300])
        try:
            return decode(reply.get("value"), self._resolve)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ProgramRaised(f"unreadable return value: {exc}") from exc


def _walk(node: Any) -> Any:
    """Every node under ``node`` (``ast.walk`` without importing ``ast``, in another order)."""
    todo = [node]
    while todo:
        node = todo.pop()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, _ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, _ast.AST))


def prelude_stubs(prelude: str) -> frozenset[str]:
    """Functions the prelude only declares (no ``return``/``yield``: a docstring, maybe an import): the
    program supplies them.

    HumanEval's prompt ends with the entry point's signature and docstring; its other functions (``poly``,
    ``encode_cyclic``) are helpers that ``check`` relies on and must stay the judge's own.
    """
    if prelude in _STUBS:
        return _STUBS[prelude]
    try:
        tree: Any = compile(prelude, "<prelude>", "exec", _ast.PyCF_ONLY_AST)  # what ast.parse does
    except SyntaxError:
        return frozenset()
    returns = (_ast.Return, _ast.Yield, _ast.YieldFrom)
    stubs = frozenset(
        node.name
        for node in tree.body
        if isinstance(node, _ast.FunctionDef | _ast.AsyncFunctionDef)
        and not any(isinstance(inner, returns) for stmt in node.body for inner in _walk(stmt))
    )
    if len(_STUBS) < 256:
        _STUBS[prelude] = stubs
    return stubs


def run_test(test: str, link: Link, names: list[str], setup_code: str, prelude: str,
             entry: str = "") -> tuple[str, str]:
    """(status, reason) of one test: passed, failed, timed_out or crashed.

    Builtin names stay the judge's (a program must not replace the ``len`` a test uses), except ``entry``,
    the task's own function: a task named ``sum`` tests the program's ``sum``, never the builtin (which
    would pass any program), and a program that does not define it fails."""
    session = Session(link)
    proxies = {n: Proxy(session, n) for n in names if isinstance(n, str) and not hasattr(builtins, n)}
    if isinstance(entry, str) and entry.isidentifier() and not entry.startswith("__"):
        proxies[entry] = Proxy(session, entry)
    namespace: dict[str, Any] = {"__name__": "__judge__", **proxies}
    try:
        exec(compile(setup_code, "<setup>", "exec"), namespace)
        from_setup = {n for n, p in proxies.items() if namespace.get(n) is not p}
        exec(compile(prelude, "<prelude>", "exec"), namespace)
    except Exception as exc:
        return "crashed", f"test setup failed: {type(exc).__name__}: {exc}"
    for name in prelude_stubs(prelude):
        if name in proxies and name not in from_setup:
            namespace[name] = proxies[name]
    try:
        exec(compile(test, "<test>", "exec"), namespace)
    except AssertionError:
        return "failed", "assertion failed"
    except ProgramRaised as exc:
        return "failed", f"program raised {exc}"
    except ProgramGone as exc:
        return exc.status, exc.reason
    except Exception as exc:
        return "failed", f"{type(exc).__name__}: {str(exc)[:200]}"
    return "passed", ""
