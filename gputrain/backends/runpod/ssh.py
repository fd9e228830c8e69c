"""SSH to a pod over its published ``22/tcp`` port (``ssh.direct``): key, readiness, copy, run.

RunPod's proxy endpoint carries an interactive shell only, so everything here uses ``ssh.direct``. Each run
gets its own ed25519 key (its public half rides in the pod's ``PUBLIC_KEY``), kept under
``$GPUTRAIN_HOME/runpod/<pod name>/`` so that ``up`` can reuse the pod and ``down`` can forget it. Host
keys are accepted on first use into a per-pod known_hosts file: pods are short-lived and fresh each time.
Copies use rsync when both ends have it, scp otherwise.

ssh exits 255 when the connection fails or drops (its own errors); a command on the pod never gets to
report that code through us, so 255 becomes :class:`SshConnectionLost` and never a training's exit code.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gputrain.backends.runpod.pods import SshEndpoint
from gputrain.errors import RunPodError


def state_dir(pod_name: str) -> Path:
    """``$GPUTRAIN_HOME/runpod/<pod name>``; a name from the API is checked before it becomes a path."""
    from gputrain.home import under_home

    return under_home("runpod", pod_name, what="pod name")


def ensure_key(pod_name: str) -> tuple[Path, str]:
    """The pod's private key path and public key text, created once per pod name."""
    folder = state_dir(pod_name)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = folder / "id_ed25519"
    if not key.exists():
        tmp = folder / "id_ed25519.tmp"
        for stale in (tmp, tmp.with_suffix(".tmp.pub")):
            stale.unlink(missing_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gputrain-{pod_name}", "-f", str(tmp)],
            check=True, stdin=subprocess.DEVNULL,
        )
        os.replace(tmp.with_suffix(".tmp.pub"), folder / "id_ed25519.pub")
        os.replace(tmp, key)
    return key, (folder / "id_ed25519.pub").read_text().strip()


def forget_key(pod_name: str) -> None:
    """Delete the pod's key folder; a name that is not a plain name never had one (nothing to delete)."""
    from gputrain.home import UnsafeNameError

    try:
        folder = state_dir(pod_name)
    except UnsafeNameError:
        return
    shutil.rmtree(folder, ignore_errors=True)


LOCAL_ONLY = ("training_output.log", "runpod.json", "plan.json", "run_multigpu.sh", "container.log")
"""Names in a job folder that the local side writes itself (the live log, the run's record, the plan and
launcher it uploads, the API's container log): a pod's file of that name is never copied over them, so the
record that ``reconcile`` and a ``--retry`` read is only ever what this process wrote."""
PLAIN_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}\Z")
"""A name a pod lists that may become a local path."""

SSH_LOST = 255
"""ssh's own failure code: the connection could not be made or dropped."""


class SshConnectionLost(RunPodError):
    """ssh exited 255: the pod could not be reached (or the connection dropped). Not the training's code."""


_CAUSES = re.compile(r"No space left on device|Disk quota exceeded|Read-only file system|Permission denied|"
                     r"File too large")


def copy_cause(stderr: bytes) -> str:
    """The line of rsync's/scp's stderr that says why: "No space left on device" rather than the closing
    "rsync error: error in file IO (code 11)"."""
    lines = stderr.decode(errors="replace").strip().splitlines()
    for line in lines:
        if found := _CAUSES.search(line):  # the cause first: the path before it can be long
            return f"{found.group(0)}: {line[:found.start()].strip().rstrip(':')}"
    return lines[-1].strip() if lines else ""


class PodShell:
    """ssh/rsync/scp invocations against one pod endpoint.

    ``keepalive_s``: seconds between ssh keep-alive probes; three unanswered probes end a session, so a
    dead connection is noticed within about ``3 × keepalive_s`` instead of hanging.
    """

    def __init__(self, endpoint: SshEndpoint, key: Path, connect_timeout_s: int = 10,
                 keepalive_s: int = 15) -> None:
        self.endpoint = endpoint
        self.key = key
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.current: subprocess.Popen[bytes] | None = None

    @property
    def options(self) -> list[str]:
        return [
            "-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={self.key.parent / 'known_hosts'}",
            "-o", f"ConnectTimeout={self.connect_timeout_s}", "-o", f"ServerAliveInterval={self.keepalive_s}",
            "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR",
        ]

    @property
    def target(self) -> str:
        return f"{self.endpoint.username}@{self.endpoint.host}"

    def remote(self, path: str) -> str:
        """``path`` on the pod as an rsync/scp operand (``user@[v6]:path`` for an IPv6 pod)."""
        return f"{self.endpoint.username}@{self.endpoint.copy_host}:{path}"

    def ssh_argv(self, command: str) -> list[str]:
        return ["ssh", *self.options, "-p", str(self.endpoint.port), "--", self.target, command]

    def command_line(self) -> str:
        """What a person types to get a shell on the pod (shown by ``status``)."""
        return shlex.join(["ssh", "-i", str(self.key), "-p", str(self.endpoint.port), "--", self.target])

    def check(self, command: str = "true", timeout_s: float = 30) -> bool:
        try:
            proc = subprocess.run(
                self.ssh_argv(command), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    def wait_until_ready(self, deadline: float, pause_s: float = 1.0) -> None:
        """``ssh true`` until it works or the monotonic ``deadline`` passes."""
        while True:
            if self.check("true", timeout_s=max(1.0, min(30.0, deadline - time.monotonic()))):
                return
            if time.monotonic() + pause_s >= deadline:
                where = f"{self.endpoint.copy_host}:{self.endpoint.port}"
                raise RunPodError(f"pod sshd at {where} did not accept our key before the deadline")
            time.sleep(pause_s)

    def _rsync_ok(self) -> bool:
        return shutil.which("rsync") is not None and self.check("command -v rsync >/dev/null")

    def _copy_argv(self, sources: list[str], dest: str, bwlimit_kbps: int | None, upload: bool) -> list[str]:
        """rsync when both ends have it; on download the local training log (streamed live) is kept."""
        ssh = shlex.join(["ssh", *self.options, "-p", str(self.endpoint.port)])
        if self._rsync_ok():
            # Download: regular files and folders only (-rt, not -a): a pod's symbolic link (container.log ->
            # /proc/self/environ), device or FIFO is skipped, never recreated here for us to read through,
            # and the pod's permission bits are not taken over. --partial only for uploads (resumed by the
            # next try); a download that fails (a full disk) must not leave a truncated file under its real name.
            argv = ["rsync", "-a" if upload else "-rt", *(["--partial"] if upload else []), "-e", ssh]
            if bwlimit_kbps:
                argv.append(f"--bwlimit={bwlimit_kbps}")
            if not upload:  # a second guard behind the listed names: rsync's receiver applies them too
                argv += ["--exclude=training_output.log", *(f"--exclude=/{n}" for n in LOCAL_ONLY)]
            return [*argv, *sources, dest]
        argv = ["scp", "-r", "-p", *self.options, "-P", str(self.endpoint.port)]
        if bwlimit_kbps:
            argv += ["-l", str(bwlimit_kbps * 8)]
        return [*argv, *sources, dest]

    def upload(self, sources: list[Path], remote_dir: str, bwlimit_kbps: int | None = None) -> None:
        self.run_checked(f"mkdir -p {shlex.quote(remote_dir)}", "create the remote folder")
        argv = self._copy_argv([str(s) for s in sources], self.remote(f"{remote_dir}/"), bwlimit_kbps, True)
        self._wait(argv, f"upload to {self.remote(remote_dir)}")

    def download(self, remote_dir: str, local_dir: Path, timeout_s: float | None = None) -> None:
        """The plainly named entries of ``remote_dir`` but :data:`LOCAL_ONLY` (listed, then copied by name: scp
        has no exclude), regular files and folders only."""
        from gputrain.backends.runpod.salvage import drop_non_regular

        listing = self.run_checked(f"cd {shlex.quote(remote_dir)} && ls -1A .", "list the job folder", timeout_s)
        names = [n for n in listing.split() if PLAIN_NAME.match(n) and n not in LOCAL_ONLY]
        if names:
            self.download_paths([f"{remote_dir}/{n}" for n in names], local_dir, timeout_s)
            drop_non_regular(local_dir, names)

    def download_paths(self, remote_paths: list[str], local_dir: Path, timeout_s: float | None = None) -> None:
        """Copy remote files/folders into ``local_dir``; a copy that does not finish in ``timeout_s`` is
        stopped and raises (salvage has a time budget)."""
        local_dir.mkdir(parents=True, exist_ok=True)
        argv = self._copy_argv([self.remote(p) for p in remote_paths], f"{local_dir}/", None, False)
        self._wait(argv, f"download from {self.target}", timeout_s)

    def run_checked(self, command: str, what: str, timeout_s: float | None = None) -> str:
        """Run ``command`` and return its stdout; 255 raises :class:`SshConnectionLost`."""
        argv = self.ssh_argv(command)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SshConnectionLost(f"could not {what} on the pod: no answer within {timeout_s:.0f} s") from None
        if proc.returncode == SSH_LOST:
            raise SshConnectionLost(f"could not {what}: lost the ssh connection "
                                    f"({(proc.stderr or '').strip()[:160] or 'ssh exit 255'})")
        if proc.returncode != 0:
            raise RunPodError(f"could not {what} on the pod: {(proc.stderr or '').strip()[:200]}")
        return proc.stdout

    def _wait(self, argv: list[str], what: str, timeout_s: float | None = None) -> None:
        with self._child(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE) as proc:
            try:
                _, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise RunPodError(f"{what} did not finish within {timeout_s:.0f} s") from None
        if proc.returncode != 0:
            text = f"{what} failed (exit {proc.returncode}): {copy_cause(err or b'')[:200]}"
            if proc.returncode == SSH_LOST or not self.check("true", timeout_s=self.connect_timeout_s + 5):
                raise SshConnectionLost(text)
            raise RunPodError(text)

    def stream_bytes(self, command: str, on_chunk: Callable[[bytes], None]) -> int:
        """Run ``command`` and pass its output on as it comes (bytes, so a caller can count an offset)."""
        with self._child(self.ssh_argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            while chunk := os.read(proc.stdout.fileno(), 65536):
                on_chunk(chunk)
            return proc.wait()

    def stream(self, command: str, stdin_text: str, on_line: Callable[[str], None]) -> int:
        """Run ``command`` on the pod, feed ``stdin_text`` (secret exports) and pass each output line on."""
        argv = self.ssh_argv(command)
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        with self._child(argv, **pipes) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(stdin_text.encode())
            proc.stdin.close()
            for raw in proc.stdout:
                on_line(raw.decode(errors="replace").rstrip("\n"))
            return proc.wait()

    @contextmanager
    def _child(self, argv: list[str], **kw: int) -> Iterator[subprocess.Popen[bytes]]:
        """A child that is stopped (not left running) when the caller is interrupted."""
        proc = subprocess.Popen(argv, **kw)  # type: ignore[call-overload]
        self.current = proc
        try:
            yield proc
        finally:
            self.current = None
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
