"""Run ``gputrain ARGS`` as its own process, forked from a warm parent (:mod:`tests.support.cli_zygote`).

``gputrain(*args, cwd=, env=)`` returns what ``subprocess.run([gputrain, *args], capture_output=True)`` returns:
the exit code (negative for a killing signal), stdout and stderr as the process wrote them to its file
descriptors. The child is a real process (own pid, cwd, environment, fds, exit), only its interpreter start-up
and imports are done once per test worker. A call goes to a fresh ``python -m gputrain`` instead
- ``GPUTRAIN_TEST_FRESH_CLI=1`` (the whole suite the slow, plain way, e.g. to rule this harness out), or
- never otherwise: the ``PYTHON*`` variables act at interpreter start-up, which the child does not repeat, so
  each set of them the tests use gets its own warm parent, started with them.
``tests/unit/test_cli_zygote.py`` holds the two ways to the same output and exit codes.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).with_name("cli_zygote.py")


def _startup_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON")))


class Zygote:
    """One warm parent process; requests one at a time (a test worker is single-threaded)."""

    def __init__(self, startup: tuple[tuple[str, str], ...]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update(dict(startup))
        self.proc = subprocess.Popen([sys.executable, str(ZYGOTE), str(theirs.fileno())], pass_fds=[theirs.fileno()],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
        theirs.close()
        self.conn = ours

    def call(self, request: dict[str, Any], stdin: bytes, timeout: float | None) -> tuple[int, bytes, bytes]:
        """Fork one child for ``request``; its exit code, stdout and stderr (read from pipes, as
        ``subprocess.run`` reads them: until every writer, the child's own children too, has closed them)."""
        pipes = [os.pipe() for _ in range(3)]
        child_fds = [pipes[0][0], pipes[1][1], pipes[2][1]]
        socket.send_fds(self.conn, [json.dumps(request).encode()], child_fds)
        for fd in child_fds:
            os.close(fd)
        pid = int(self._answer()["pid"])
        deadline = None if timeout is None else time.monotonic() + timeout
        out, err = _communicate(pipes[0][1], stdin, pipes[1][0], pipes[2][0], deadline)
        if out is None:
            os.kill(pid, signal.SIGKILL)
            self._answer()
            raise TimeoutError
        return int(self._answer()["code"]), out, err or b""

    def _answer(self) -> dict[str, Any]:
        message = self.conn.recv(1 << 16)
        if not message:
            raise RuntimeError(f"the warm gputrain parent died (exit {self.proc.poll()}); see stderr")
        answer: dict[str, Any] = json.loads(message)
        return answer

    def close(self) -> None:
        self.conn.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _communicate(stdin_fd: int, data: bytes, out_fd: int, err_fd: int,
                 deadline: float | None) -> tuple[bytes | None, bytes | None]:
    """Write ``data`` to the child's stdin and read its stdout and stderr to EOF; (None, None) past ``deadline``."""
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    with selectors.DefaultSelector() as sel:
        sel.register(out_fd, selectors.EVENT_READ)
        sel.register(err_fd, selectors.EVENT_READ)
        if data:
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            os.close(stdin_fd)
        view = memoryview(data)
        try:
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None, None
                for key, _ in sel.select(left):
                    fd = int(key.fd)
                    if fd == stdin_fd:
                        try:
                            view = view[os.write(fd, view[:65536]):]
                        except BrokenPipeError:
                            view = view[len(view):]
                        if not view:
                            sel.unregister(fd)
                            os.close(fd)
                        continue
                    chunk = os.read(fd, 65536)
                    if chunk:
                        chunks[fd].append(chunk)
                    else:
                        sel.unregister(fd)
        finally:
            for fd in list(sel.get_map()):
                os.close(fd)
            for fd in (out_fd, err_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


_zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}


def _zygote(startup: tuple[tuple[str, str], ...]) -> Zygote:
    if startup not in _zygotes or _zygotes[startup].proc.poll() is not None:
        _zygotes[startup] = Zygote(startup)
    return _zygotes[startup]


@atexit.register
def _close_all() -> None:
    for zygote in _zygotes.values():
        zygote.close()


def gputrain(*args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None, text: bool = True,
             input: str | bytes | None = None, timeout: float | None = 120,
             rlimits: Mapping[str, int] | None = None) -> subprocess.CompletedProcess[Any]:
    """``gputrain *args`` in ``cwd`` with exactly ``env`` (default: this process's environment); ``rlimits``
    such as ``{"RLIMIT_AS": 1 << 30}`` are set in the child before it runs, as a ``preexec_fn`` would."""
    full_env = dict(os.environ if env is None else env)
    where = str(Path(cwd) if cwd is not None else Path.cwd())
    if os.environ.get("GPUTRAIN_TEST_FRESH_CLI") == "1":
        return _fresh(args, where, full_env, text, input, timeout, rlimits)
    data = input.encode() if isinstance(input, str) else (input or b"")
    request = {"args": list(args), "cwd": where, "env": full_env, "rlimits": dict(rlimits or {})}
    try:
        code, out, err = _zygote(_startup_env(full_env)).call(request, data, timeout)
    except TimeoutError:
        raise subprocess.TimeoutExpired(["gputrain", *args], timeout or 0) from None
    if text:  # as subprocess's text mode reads it: universal newlines
        return subprocess.CompletedProcess(["gputrain", *args], code, _universal(out.decode()),
                                           _universal(err.decode(errors="replace")))
    return subprocess.CompletedProcess(["gputrain", *args], code, out, err)


def _universal(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _fresh(args: Sequence[str], cwd: str, env: dict[str, str], text: bool, input: str | bytes | None,
           timeout: float | None, rlimits: Mapping[str, int] | None) -> subprocess.CompletedProcess[Any]:
    def cap() -> None:
        import resource

        for name, limit in (rlimits or {}).items():
            resource.setrlimit(getattr(resource, name), (limit, limit))

    if text and isinstance(input, bytes):
        input = input.decode()
    return subprocess.run([sys.executable, "-m", "gputrain", *args], cwd=cwd, env=env, capture_output=True,
                          text=text, input=input, timeout=timeout, preexec_fn=cap if rlimits else None)
