"""The training on the pod, detached from ssh: it outlives a dropped connection or a closed laptop.

Layout on the pod (``<remote>`` is the run's own folder, ``/workspace/<pod name>`` by default)::

    <remote>/run_multigpu.sh, plan.json     the launcher and the plan
    <remote>/job/                           GPUTRAIN_JOB_DIR: metrics, checkpoints, summary, model
    <remote>/.gputrain/detach.sh            started under setsid + nohup; runs the launcher in its own
                                            process group and writes the launcher's exit code
    <remote>/.gputrain/pid, child.pid       the detach script's pid, the launcher's process group
    <remote>/.gputrain/run.out              everything the launcher prints
    <remote>/.gputrain/exit_code            the training's own exit code (written last, by rename)

``up`` follows ``run.out`` from a byte offset with ``tail --pid`` (so a reconnect resumes where the last
connection stopped) and reads the exit code from the file, never from ssh: ssh's 255 is a lost connection.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable

from gputrain.backends.runpod.ssh import PodShell, SshConnectionLost

STATE = ".gputrain"

DETACH_SCRIPT = """#!/usr/bin/env bash
# Written by gputrain runpod up. Started detached (setsid nohup) so the training outlives the ssh session;
# the launcher gets its own process group (to stop it as a whole) and its exit code lands in exit_code.
set -u
cd "$(dirname "$0")/.."
state=.gputrain
echo "$$" > "$state/pid.tmp" && mv "$state/pid.tmp" "$state/pid"
# The launcher's shell and its tee start with SIGTERM ignored, so a stop reaches the training (whose
# runtime handles SIGTERM: checkpoint at the step boundary, exit 75) without breaking its output pipe,
# and the launcher still writes its closing summary.
( trap '' TERM; exec setsid bash run_multigpu.sh > "$state/run.out" 2>&1 < /dev/null ) &
child=$!
echo "$child" > "$state/child.pid.tmp" && mv "$state/child.pid.tmp" "$state/child.pid"
trap 'kill -TERM -- "-$child" 2>/dev/null' TERM INT
wait "$child"; rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
echo "$rc" > "$state/exit_code.tmp" && mv "$state/exit_code.tmp" "$state/exit_code"
"""

_STATUS_RE = re.compile(r"\A(?P<code>-?\d{1,4}|none) (?P<alive>alive|gone|unstarted)\s*\Z")


def mask_values(text: str, exports: str) -> str:
    """``text`` (what the pod said back) with each value of the ``NAME=value`` lines in ``exports`` replaced
    by ``***``, as sent (shell-quoted) and as the shell sees it.

    The pod got the secrets to run the training; it must not get them written into the launcher's terminal,
    ``runpod.json`` or the registry by echoing its input into an error (an image with ``set -v``, or a
    hostile one). Values shorter than 4 characters are not masked (they would blank out the message)."""
    forms: set[str] = set()
    for line in exports.splitlines():
        _, sep, quoted = line.partition("=")
        if not sep:
            continue
        forms.add(quoted)
        try:
            forms.update(shlex.split(quoted))
        except ValueError:
            pass
    for form in sorted((f for f in forms if len(f) >= 4), key=len, reverse=True):
        text = text.replace(form, "***")
    return text


class RemoteRun:
    """One detached training in ``remote`` on the pod behind ``shell``."""

    def __init__(self, shell: PodShell, remote: str) -> None:
        self.shell = shell
        self.remote = remote
        self.state = f"{remote}/{STATE}"
        self.offset = 0
        """Bytes of ``run.out`` already passed on."""

    def launch(self, exports: str) -> None:
        """Start the launcher detached. Secrets arrive as shell assignments on ssh's stdin and live only in
        the training's environment: never in argv, a file or the pod's env."""
        q = shlex.quote
        # Only the last command goes to the background (braces): the secrets are read in the foreground,
        # and nothing of the detached run holds the ssh session's output open.
        command = (f"cd {q(self.remote)} && set -a && eval \"$(cat)\" && set +a && "
                   f"{{ GPUTRAIN_JOB_DIR={q(self.remote + '/job')} setsid nohup bash {STATE}/detach.sh "
                   "</dev/null >/dev/null 2>&1 & }")
        lines: list[str] = []
        rc = self.shell.stream(command, exports, lines.append)
        if rc == 255:
            raise SshConnectionLost("lost the ssh connection while starting the training")
        if rc != 0:
            from gputrain.errors import RunPodError

            said = mask_values(" ".join(lines), exports)
            raise RunPodError(f"could not start the training on the pod (exit {rc}): {said[:200]}")

    def follow(self, on_chunk: Callable[[bytes], None]) -> int:
        """Pass on ``run.out`` from :attr:`offset` until the detach script exits; return ssh's code (0 when
        the run ended, 255 when the connection was lost)."""
        q = shlex.quote
        command = (f"cd {q(self.state)} && for _ in $(seq 300); do [ -s pid ] && break; sleep 0.2; done && "
                   f"touch run.out && exec tail -s 0.5 -c +{self.offset + 1} --pid=\"$(cat pid)\" -f run.out")

        def counted(chunk: bytes) -> None:
            self.offset += len(chunk)
            on_chunk(chunk)

        return self.shell.stream_bytes(command, counted)

    def status(self, timeout_s: float = 60) -> tuple[int | None, str]:
        """(the training's exit code or None, and whether the detach script is alive, gone or unstarted)."""
        q = shlex.quote
        command = (f"cd {q(self.state)} 2>/dev/null || {{ echo none unstarted; exit 0; }}; "
                   "code=$(cat exit_code 2>/dev/null || echo none); "
                   "if [ ! -s pid ]; then echo \"$code unstarted\"; "
                   "elif kill -0 \"$(cat pid)\" 2>/dev/null; then echo \"$code alive\"; else echo \"$code gone\"; fi")
        out = self.shell.run_checked(command, "read the training's exit code", timeout_s=timeout_s)
        match = _STATUS_RE.match(out.strip())
        if match is None:
            return None, "gone"
        code = match.group("code")
        return (None if code == "none" else int(code)), match.group("alive")

    def stop(self, grace_s: float, pause_s: float = 0.5) -> int | None:
        """SIGTERM the launcher's process group (the runtime checkpoints at the next step boundary and exits)
        and wait up to ``grace_s`` for its exit code."""
        q = shlex.quote
        self.shell.run_checked(f"cd {q(self.state)} && [ -s child.pid ] && kill -TERM -- \"-$(cat child.pid)\" "
                               "2>/dev/null; true", "stop the training", timeout_s=max(5.0, grace_s))
        deadline = time.monotonic() + grace_s
        while True:
            code, alive = self.status(timeout_s=max(5.0, grace_s))
            if code is not None or alive != "alive" or time.monotonic() + pause_s > deadline:
                return code
            time.sleep(pause_s)
