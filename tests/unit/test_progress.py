"""Long phases show progress on a terminal and nothing elsewhere (#31 point 11).

The training prints a plain start/end line around a long phase (``gputrain.contract.phases``); ``gputrain run``
draws the running phase with rich on stderr only when stderr is a terminal (a real pty here), and a pipe gets
the job's lines alone, with no escape sequence."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from gputrain.contract import phases

#: What ``gputrain run`` does with the job's output: its lines through ``job_echo``, a phase taking a while.
_JOB = """
import sys, time
from gputrain.cli.progress import job_echo
from gputrain.contract import phases
with job_echo(sys.stdout) as echo:
    echo.write("[gnn] step 96/96 loss 0.05\\n")
    echo.write("[rank0]:" + phases.start_line("ONNX export and onnxruntime check") + "\\n")
    time.sleep(0.6)
    echo.write("[rank0]:" + phases.end_line("ONNX export and onnxruntime check", 0.6) + "\\n")
    echo.write("[gnn] wrote result.json\\n")
"""
_LINES = ["[gnn] step 96/96 loss 0.05", "[rank0]:[phase] ONNX export and onnxruntime check ...",
          "[rank0]:[phase] ONNX export and onnxruntime check done in 0.6 s", "[gnn] wrote result.json"]


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}, "TERM": "xterm-256color",
            "COLUMNS": "100"}


def test_phase_lines_read_back_with_or_without_the_launchers_prefix() -> None:
    assert phases.parse(phases.start_line("final evaluation")) == ("final evaluation", None)
    assert phases.parse("[rank0]:" + phases.end_line("final evaluation", 3.14159)) == ("final evaluation", 3.1)
    assert phases.parse("[gnn] step 4/96 loss 0.3") is None
    assert phases.parse("user text mentioning [phase] x ...") is None  # only at the start of the job's line


def test_on_a_terminal_the_running_phase_is_drawn_on_stderr_and_stdout_keeps_the_lines() -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", _JOB], stdout=subprocess.PIPE, stderr=slave, env=_env(),
                            text=True)
    os.close(slave)
    drawn = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty closed: the program ended
                break
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    out = proc.communicate(timeout=60)[0]
    os.close(master)
    assert proc.returncode == 0
    assert "ONNX export and onnxruntime check" in drawn.decode("utf-8", "replace") and b"\x1b[" in drawn
    assert [line for line in out.splitlines() if line] == _LINES  # the lines themselves, where they were


def test_without_a_terminal_nothing_is_drawn_and_no_escape_reaches_a_log() -> None:
    proc = subprocess.run([sys.executable, "-c", _JOB], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "\x1b" not in proc.stdout
    assert proc.stdout.splitlines() == _LINES
