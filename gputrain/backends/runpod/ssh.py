"""SSH to a pod over its published ``22/tcp`` port (``ssh.direct``): key, readiness, copy, run.

RunPod's proxy endpoint carries an interactive shell only, so everything here uses ``ssh.direct``. Each run
gets its own ed25519 key (its public half rides in the pod's ``PUBLIC_KEY``), kept under
``$GPUTRAIN_HOME/runpod/<pod name>/`` so that ``up`` can reuse the pod and ``down`` can forget it. Host
keys are accepted on first use into a per-pod known_hosts file: pods are short-lived and fresh each time.
Copies use rsync when both ends have it, scp otherwise.
"""

from __future__ import annotations

import os
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


class PodShell:
    """ssh/rsync/scp invocations against one pod endpoint."""

    def __init__(self, endpoint: SshEndpoint, key: Path, connect_timeout_s: int = 10) -> None:
        self.endpoint = endpoint
        self.key = key
        self.options = [
            "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={key.parent / 'known_hosts'}",
            "-o", f"ConnectTimeout={connect_timeout_s}", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4", "-o", "LogLevel=ERROR",
        ]
        self.current: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"{self.endpoint.username}@{self.endpoint.host}"

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
                where = f"{self.endpoint.host}:{self.endpoint.port}"
                raise RunPodError(f"pod sshd at {where} did not accept our key before the deadline")
            time.sleep(pause_s)

    def _rsync_ok(self) -> bool:
        return shutil.which("rsync") is not None and self.check("command -v rsync >/dev/null")

    def _copy_argv(self, sources: list[str], dest: str, bwlimit_kbps: int | None, upload: bool) -> list[str]:
        """rsync when both ends have it; on download the local training log (streamed live) is kept."""
        ssh = shlex.join(["ssh", *self.options, "-p", str(self.endpoint.port)])
        if self._rsync_ok():
            argv = ["rsync", "-a", "--partial", "-e", ssh]
            if bwlimit_kbps:
                argv.append(f"--bwlimit={bwlimit_kbps}")
            if not upload:
                argv.append("--exclude=training_output.log")
            return [*argv, *sources, dest]
        argv = ["scp", "-r", "-p", *self.options, "-P", str(self.endpoint.port)]
        if bwlimit_kbps:
            argv += ["-l", str(bwlimit_kbps * 8)]
        return [*argv, *sources, dest]

    def upload(self, sources: list[Path], remote_dir: str, bwlimit_kbps: int | None = None) -> None:
        self.run_checked(f"mkdir -p {shlex.quote(remote_dir)}", "create the remote folder")
        argv = self._copy_argv([str(s) for s in sources], f"{self.target}:{remote_dir}/", bwlimit_kbps, True)
        self._wait(argv, f"upload to {self.target}:{remote_dir}")

    def download(self, remote_dir: str, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        argv = self._copy_argv([f"{self.target}:{remote_dir}/."], f"{local_dir}/", None, False)
        self._wait(argv, f"download from {self.target}:{remote_dir}")

    def run_checked(self, command: str, what: str) -> None:
        argv = self.ssh_argv(command)
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RunPodError(f"could not {what} on the pod: {(proc.stderr or '').strip()[:200]}")

    def _wait(self, argv: list[str], what: str) -> None:
        with self._child(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE) as proc:
            _, err = proc.communicate()
        if proc.returncode != 0:
            last = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise RunPodError(f"{what} failed (exit {proc.returncode}): {last[0][:200]}")

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
