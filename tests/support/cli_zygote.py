"""A warm parent that forks one real ``gputrain`` process per CLI call in the tests.

Why: a fresh ``python -m gputrain`` costs 0.25-0.55 s of CPU here (interpreter, Typer, building the pydantic
models), and the suite starts ~200 of them: a third of the fast loop's CPU. This process imports the CLI once,
then for each request forks a child that *is* a ``gputrain`` process: its own pid, working directory,
environment, file descriptors 0/1/2 (files the test reads back), exit code or killing signal, at-exit
handlers. What the child does not repeat is the interpreter's start-up and the imports, so nothing that is
decided at start-up may differ: the client (:mod:`tests.support.cli`) sends a call to a fresh process instead
whenever the caller's ``PYTHON*`` variables differ from this process's, and the modules imported here read no
environment at import time (the child gets the caller's environment before anything runs).

Protocol over the Unix ``SOCK_SEQPACKET`` socket given as ``argv[1]`` (a file descriptor): a request is one
message carrying three file descriptors (the child's stdin, stdout, stderr: the caller's pipes, so output is a
pipe as under :mod:`subprocess`) and JSON ``{"args", "cwd", "env", "rlimits"}``; the answers are the messages
``{"pid": n}`` once forked, then ``{"code": n}`` (a negative n: killed by that signal, as :mod:`subprocess`
reports it).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import pkgutil
import resource
import signal
import socket
import sys
import traceback
from typing import Any

# What most commands import inside their functions, warmed once here (the CLI package itself, the models, the
# planner, the templates; all light: a test in tests/unit/test_cli_zygote.py checks no torch comes in).
WARM = ("gputrain.contract.plan", "gputrain.recipe.schema", "gputrain.recipe.loader", "gputrain.planner",
        "gputrain.logs.summarize", "gputrain.registry.store", "jinja2", "yaml", "typer._adapters")


def warm() -> None:
    import gputrain.cli

    names = [f"gputrain.cli.{m.name}" for m in pkgutil.iter_modules(gputrain.cli.__path__)]
    for name in (*names, *WARM):
        try:
            importlib.import_module(name)
        except ImportError:  # a module renamed or gone: the child imports what it needs itself
            pass


def child(request: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
    """Become the ``gputrain`` process of ``request``; never returns."""
    code = 1
    try:
        conn.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for name, limit in request.get("rlimits", {}).items():
            resource.setrlimit(getattr(resource, name), (int(limit), int(limit)))
        args = list(request["args"])
        sys.argv = ["gputrain", *args]
        from gputrain.cli.main import main

        try:
            main(args)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 130
        except BaseException:  # what an uncaught exception does to a real process: traceback, exit 1
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                code = code or 120
    finally:
        os._exit(code)


def serve(conn: socket.socket) -> None:
    while True:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        if not message:
            return
        request = json.loads(message.decode())
        pid = os.fork()
        if pid == 0:
            child(request, fds, conn)
        for fd in fds:
            os.close(fd)
        conn.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        conn.send(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    warm()
    serve(socket.socket(fileno=int(sys.argv[1])))
