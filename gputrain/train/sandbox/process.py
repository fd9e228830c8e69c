"""One sandboxed program: start it, talk to it over two pipes, kill it as a whole.

The child is ``unshare ... python -I -S -c <runner.py>`` in a new session (so its process group can be
killed at once); the PID namespace's init dies with that group and the kernel then kills whatever the
program forked, even processes that called ``setsid``. Output is read by two threads and capped; going
over the cap kills the program (a program that floods stdout gets no more CPU).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gputrain.train.sandbox.config import UNSHARE_ARGS, SandboxLimits, minimal_env, mount_plan

RUNNER_SOURCE = (Path(__file__).with_name("runner.py")).read_text(encoding="utf-8")
MAX_REPLY_BYTES = 4 << 20


class SandboxDied(BaseException):
    """The program's process ended (crash, ``os._exit``, killed by a limit). BaseException: tests'
    ``except Exception`` must not swallow it."""


class SandboxTimeout(BaseException):
    """A call (or the program's start) ran past its time."""


@dataclass(frozen=True)
class Isolation:
    level: str  # namespaces | uid | rlimits
    uid: int | None
    gid: int | None
    hide: tuple[str, ...]


class SandboxProcess:
    """A started program. Use :meth:`start` then :meth:`call`; always :meth:`close` (idempotent)."""

    def __init__(self, program: str, setup_code: str, limits: SandboxLimits, isolation: Isolation) -> None:
        self.limits = limits
        self.isolation = isolation
        self.exit_note: int | None = None
        self.output_exceeded = False
        self._out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._buffer = b""
        self._closed = False
        self.workdir = tempfile.mkdtemp(prefix="gputrain-sbx-")
        level = isolation.level
        if isolation.uid is not None:
            os.chown(self.workdir, isolation.uid, isolation.gid if isolation.gid is not None else -1)
        os.chmod(self.workdir, 0o700)
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        cmd = [sys.executable, "-I", "-S", "-c", RUNNER_SOURCE, str(to_child_r), str(from_child_w)]
        if level == "namespaces":
            cmd = [shutil.which("unshare") or "unshare", *UNSHARE_ARGS, *cmd]
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=minimal_env(self.workdir), cwd=self.workdir, pass_fds=(to_child_r, from_child_w),
                start_new_session=True,
                user=isolation.uid if level == "uid" else None,
                group=isolation.gid if level == "uid" else None,
                extra_groups=[] if level == "uid" else None,
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
            threading.Thread(target=self._drain, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))
        ]
        for t in self._readers:
            t.start()
        cfg: dict[str, Any] = {
            "program": program, "setup": setup_code, "workdir": self.workdir,
            "namespaces": level == "namespaces", "limits": limits.as_dict(),
            "uid": isolation.uid if level == "namespaces" else None, "gid": isolation.gid,
            "tmpfs_mb": limits.tmpfs_mb, **mount_plan(isolation.hide),
        }
        try:
            self._send(cfg)
        except BaseException:
            self.close()  # the child died before reading its settings: leave nothing behind
            raise

    def _drain(self, name: str, stream: IO[bytes] | None) -> None:
        assert stream is not None
        buf = self._out[name]
        while chunk := stream.read1(65536):  # type: ignore[attr-defined]
            if len(buf) < self.limits.output_bytes:
                buf.extend(chunk[: self.limits.output_bytes - len(buf)])
            else:
                self.output_exceeded = True
                self.kill()
                return

    def output(self, name: str) -> str:
        return bytes(self._out[name]).decode("utf-8", errors="replace")

    def _send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._to_child, data):]
        except OSError as exc:
            raise SandboxDied(self._death_reason()) from exc

    def _receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxTimeout(f"no answer within {timeout:.1f}s")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 65536)
            if not chunk:
                raise SandboxDied(self._death_reason())
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise SandboxDied("reply larger than the limit")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise SandboxDied("garbled reply on the control pipe") from exc
        if not isinstance(msg, dict):
            raise SandboxDied("garbled reply on the control pipe")
        if "exit" in msg:
            self.exit_note = msg["exit"] if isinstance(msg["exit"], int) else None
            raise SandboxDied(self._death_reason())
        return msg

    def _death_reason(self) -> str:
        if self.output_exceeded:
            return f"output over {self.limits.output_bytes} bytes"
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

    def start(self, timeout: float) -> list[str]:
        """Wait until the program has been defined; return the callables it defined."""
        msg = self._receive(timeout)
        if not msg.get("ready"):
            raise SandboxDied(f"program failed to load: {msg.get('error', 'unknown')}")
        names = msg.get("names")
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        self._send(request)
        return self._receive(timeout)

    def kill(self) -> None:
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
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.isolation.level == "uid" and self.isolation.uid is not None:
            sweep_uid(self.isolation.uid, self.isolation.gid)
        for t in self._readers:
            t.join(timeout=5)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def sweep_uid(uid: int, gid: int | None) -> None:
    """Without a PID namespace, escaped processes (``setsid`` + fork) survive the group kill: kill every
    process of the program's dedicated uid, as that uid (``kill(-1)`` spares the caller only)."""
    setpriv = shutil.which("setpriv")
    kill = shutil.which("kill")
    if not setpriv or not kill:
        return
    subprocess.run(
        [setpriv, f"--reuid={uid}", f"--regid={gid if gid is not None else uid}", "--clear-groups",
         kill, "-KILL", "-1"],
        capture_output=True, timeout=10, env={}, check=False,
    )
