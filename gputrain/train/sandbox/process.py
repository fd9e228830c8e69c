"""One sandboxed process: start it confined, talk to it over two pipes, kill it and all it started.

The child is ``[unshare ...] python -I -S -c <bootstrap>``, in a new session. Its code comes as source in
the bootstrap (``runner.py`` and its stdlib-only siblings), never from site-packages. Ending it:

- namespace levels: the PID namespace's init dies with the session's process group and the kernel kills
  whatever the program forked, ``setsid`` daemons included.
- other levels: the supervisor is a child subreaper, so every orphan is re-parented to it; the whole tree
  under it is killed (descendants first, the supervisor last).

Output is read by two threads that never block for long and capped; going over the cap kills the program.
Closing never waits on a pipe a stray process might hold: readers stop on a flag, descriptors are closed.

Every byte that comes back is hostile data (the program's code shares its process with the code that
answers, and can write to the pipe or replace the serializer). So every write to the child and every read
from it has a deadline, a setup error counts only before the child said it is confined (before any
untrusted code ran), and a call's reply must answer the request in flight (its nonce) with a value or an
exception and nothing else: anything else is a :class:`ProtocolViolation`, that program's failure.
"""

from __future__ import annotations

import json
import marshal
import os
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputrain.train.sandbox.config import (
    SandboxLimits,
    count_tasks,
    hidden_paths,
    interpreter,
    landlock_read_paths,
    minimal_env,
    read_only_paths,
)

MAX_REPLY_BYTES = 4 << 20
HERE = Path(__file__).resolve().parent
#: Child-side modules of each role, loaded from source by the bootstrap (the runner last, as ``__main__``).
#: The program's process gets no ``verdict.py``: it never judges, and not loading it (and the ``ast`` it
#: imports) saves a good part of each program's start.
_COMMON = (("_gputrain_sbx_wire", "wire.py"), ("_gputrain_sbx_codec", "codec.py"),
           ("_gputrain_sbx_confine", "confine.py"))
CHILD_MODULES = {"program": _COMMON, "judge": (*_COMMON, ("_gputrain_sbx_verdict", "verdict.py"))}
UNSHARE = {
    "namespaces": ("--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child"),
    "userns": ("--user", "--map-root-user", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork",
               "--kill-child"),
}


def _child_code(mode: str) -> bytes:
    """The modules of role ``mode`` compiled once here (same interpreter binary, so the same bytecode), sent
    down the request pipe at each start: the child loads them with ``marshal`` instead of compiling ~1000 lines."""
    modules = [(name, compile((HERE / filename).read_text(encoding="utf-8"), filename, "exec", optimize=2))
               for name, filename in (*CHILD_MODULES[mode], ("__main__", "runner.py"))]
    blob = marshal.dumps(modules)
    return len(blob).to_bytes(8, "big") + blob


#: Reads the length-prefixed module list from the request pipe (argv[1]), then runs the runner as __main__.
BOOTSTRAP = """import marshal, os, sys, types
fd = int(sys.argv[1])
def _take(n):
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            os._exit(3)
        out += chunk
    return bytes(out)
for name, code in marshal.loads(_take(int.from_bytes(_take(8), "big"))):
    if name == "__main__":
        exec(code, {"__name__": "__main__"})
    else:
        m = types.ModuleType(name)
        sys.modules[name] = m
        exec(code, m.__dict__)
"""
CHILD_CODE = {mode: _child_code(mode) for mode in CHILD_MODULES}


class SandboxDied(BaseException):
    """The process ended (crash, ``os._exit``, killed by a limit). BaseException: tests' ``except
    Exception`` must not swallow it."""


class ProtocolViolation(SandboxDied):
    """The child wrote something that is not a well-formed answer to the request in flight."""


class SandboxTimeout(BaseException):
    """A call (or the program's start) ran past its time."""


class SandboxSetupFailed(Exception):
    """A confinement layer could not be applied inside the child: nothing was run."""


@dataclass(frozen=True)
class Isolation:
    """How a sandboxed process is confined: ``level`` (the strongest layer) and every layer in effect."""

    level: str  # namespaces | userns | landlock | uid | rlimits
    layers: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None
    binding_paths: tuple[str, ...] = field(default=(), compare=False)
    libraries: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def strong(self) -> bool:
        """Blocks network, files outside its folder, and the trainer's secrets and processes."""
        return self.level in ("namespaces", "userns", "landlock")

    def describe(self) -> dict[str, Any]:
        return {"level": self.level, "layers": list(self.layers), "strong": self.strong}


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children first), from one pass over /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    frontier = [root]
    while frontier:
        kids = [k for p in frontier for k in parents.get(p, [])]
        found.extend(kids)
        frontier = kids
    return found


class SandboxProcess:
    """A started process in role ``program`` or ``judge``. :meth:`start`, then :meth:`call`/:meth:`send`
    and :meth:`receive`; always :meth:`close` (idempotent)."""

    def __init__(self, mode: str, settings: dict[str, Any], limits: SandboxLimits, isolation: Isolation) -> None:
        self.limits = limits
        self.isolation = isolation
        self.exit_note: int | None = None
        self.exit_why = ""
        self.output_exceeded = False
        self._out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._buffer = b""
        self._closed = False
        self._confined = False
        self._stop = threading.Event()
        level = isolation.level
        self.workdir = tempfile.mkdtemp(prefix="gputrain-sbx-")
        namespaced = level in UNSHARE
        if isolation.uid is not None and not namespaced:
            os.chown(self.workdir, isolation.uid, isolation.gid if isolation.gid is not None else -1)
        os.chmod(self.workdir, 0o700)
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        os.set_blocking(self._to_child, False)  # every write has a deadline (see send)
        cmd = [interpreter(), "-I", "-S", "-c", BOOTSTRAP, str(to_child_r), str(from_child_w)]
        if namespaced:
            cmd = [shutil.which("unshare") or "unshare", *UNSHARE[level], *cmd]
        child_dir = "/tmp" if namespaced else self.workdir
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=minimal_env(child_dir), cwd=self.workdir if not namespaced else "/",
                pass_fds=(to_child_r, from_child_w), start_new_session=True,
            )
        except BaseException:
            for fd in (self._to_child, self._from_child):
                os.close(fd)
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._readers = [
            threading.Thread(target=self._drain, args=(name, stream.fileno()), daemon=True)
            for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))
            if stream is not None
        ]
        for t in self._readers:
            t.start()
        nproc = limits.max_processes
        if isolation.uid is None and level != "userns":
            nproc += count_tasks(os.getuid())  # RLIMIT_NPROC counts every thread of the trainer's uid
        cfg: dict[str, Any] = {
            **settings, "mode": mode, "level": level, "layers": list(isolation.layers),
            "binding_paths": list(isolation.binding_paths), "libraries": dict(isolation.libraries),
           "limits": limits.as_dict(), "nproc": nproc,
            "uid": isolation.uid if level != "userns" else None, "gid": isolation.gid,
            "tmpfs_mb": limits.tmpfs_mb, "stage": self.workdir, "workdir": child_dir,
            "writable": child_dir, "hidden": hidden_paths(),
            "read_only": landlock_read_paths() if level == "landlock" else read_only_paths(),
        }
        try:
            self._write(CHILD_CODE[mode], 10.0)
            self.send(cfg, 10.0)
        except BaseException:
            self.close()  # the child died before reading its settings: leave nothing behind
            raise

    def _drain(self, name: str, fd: int) -> None:
        buf = self._out[name]
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if not ready:
                    continue
                chunk = os.read(fd, 65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            if len(buf) < self.limits.output_bytes:
                buf.extend(chunk[: self.limits.output_bytes - len(buf)])
            else:
                self.output_exceeded = True
                self.kill()
                return

    def output(self, name: str) -> str:
        return bytes(self._out[name]).decode("utf-8", errors="replace")

    def send(self, msg: dict[str, Any], timeout: float) -> None:
        """Write one line, or raise :class:`SandboxTimeout` when the child has not taken it in ``timeout``
        (a program that stops reading must not hold the trainer in a write)."""
        self._write((json.dumps(msg) + "\n").encode(), timeout)

    def _write(self, data: bytes, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            while data:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxTimeout(f"the sandbox did not read its request within {timeout:.1f}s")
                _, ready, _ = select.select([], [self._to_child], [], left)
                if ready:
                    try:
                        data = data[os.write(self._to_child, data):]
                    except BlockingIOError:
                        continue
        except OSError as exc:
            raise SandboxDied(self._death_reason()) from exc

    def _line(self, deadline: float) -> dict[str, Any]:
        """The next line from the child as a JSON object (any other shape kills the exchange)."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxTimeout("no answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 65536)
            if not chunk:
                raise SandboxDied(self._death_reason())
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise ProtocolViolation("reply larger than the limit")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ProtocolViolation("garbled reply on the control pipe") from exc
        if not isinstance(msg, dict):
            raise ProtocolViolation("garbled reply on the control pipe")
        return msg

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next message after confinement. A setup error is believed only before the child said it is
        confined (no untrusted code has run by then); after that it is the program's forgery. The
        supervisor's exit note ends the exchange (a forged one only ends the program early)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self._line(deadline)
            except SandboxTimeout:
                raise SandboxTimeout(f"no answer within {timeout:.1f}s") from None
            if not self._confined:
                if "setup_error" in msg:
                    raise SandboxSetupFailed(
                        f"sandbox ({self.isolation.level}) could not be set up: {str(msg['setup_error'])[:300]}")
                if msg == {"confined": True}:
                    self._confined = True
                    continue
                if "exit" not in msg:
                    raise ProtocolViolation("message before confinement")
            if "exit" in msg:
                self.exit_note = msg["exit"] if type(msg["exit"]) is int else None
                self.exit_why = str(msg.get("why", ""))[:80]
                raise SandboxDied(self._death_reason())
            if "setup_error" in msg or "confined" in msg:
                raise ProtocolViolation("a setup message after confinement")
            return msg

    def _death_reason(self) -> str:
        if self.output_exceeded:
            return f"output over {self.limits.output_bytes} bytes"
        if self.exit_why:
            return self.exit_why
        code = self.exit_note
        if code is None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return "control pipe closed"
        if code < 0 or code > 128:
            signum = -code if code < 0 else code - 128
            name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
            if name == "SIGXCPU":
                return "cpu time limit"
            return f"killed by {name}"
        return f"program exited with status {code}"

    def start(self, timeout: float) -> dict[str, Any]:
        """Wait for the ready message: ``{"ready": true, "names": [...]}`` or ``{"ready": false, "error"}``."""
        msg = self.receive(timeout)
        if msg.get("ready") is True and set(msg) <= {"ready", "names"}:
            return msg
        if msg.get("ready") is False and set(msg) == {"ready", "error"}:
            raise SandboxDied(f"program failed to load: {str(msg['error'])[:300]}")
        raise ProtocolViolation("malformed ready message")

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request to a program and its reply, checked: ``{"value": v}`` or ``{"error": str, "type": str}``
        answering this request's nonce, or :class:`ProtocolViolation`. The caller gets a new dict holding only
        those fields, never the child's own object."""
        deadline = time.monotonic() + timeout
        nonce = secrets.token_hex(8)
        self.send({**request, "id": nonce}, timeout)
        msg = self.receive(max(0.0, deadline - time.monotonic()))
        if msg.get("id") != nonce:
            raise ProtocolViolation("a reply to no request in flight")
        keys = set(msg) - {"id"}
        if keys == {"value"}:
            return {"value": msg["value"]}
        if keys == {"error", "type"} and type(msg["error"]) is str and type(msg["type"]) is str:
            return {"error": msg["error"][:300], "type": msg["type"][:80]}
        raise ProtocolViolation("a reply that is neither a value nor an exception")

    def kill(self) -> None:
        """Kill the process and everything it started (see the module docstring)."""
        if self.isolation.level not in UNSHARE:
            for _ in range(50):
                below = descendants(self.proc.pid)
                if not below:
                    break
                for pid in below:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._stop.set()
        for t in self._readers:
            t.join(timeout=1)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
