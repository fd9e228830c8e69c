"""Logs are shown safely: escape sequences made visible, special files refused (real CLI, subprocess)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gputrain.logs.display import safe_data, terminal_safe
from tests.support.cli import gputrain as run_gputrain

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = (b"step 1 loss 2.0\n"
           b"\x1b]0;PWNED-TITLE\x07 \x1b]52;c;cHduZWQ=\x07 \x1b[2J\x1b[H cleared \x9b31m\x07\n"
           b"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: \x1b]52;c;Y2xpcA==\x07bad\n")


def gputrain(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUTRAIN_HOME": str(cwd / "home"), "NO_COLOR": "1"}
    return run_gputrain(*args, cwd=cwd, env=env, text=False, timeout=60)


def test_escape_sequences_from_a_log_never_reach_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "training_output.log"
    log.write_bytes(HOSTILE)
    for args in ([str(log)], [str(log), "--summary"], [str(log), "--grep", "loss|cleared"]):
        proc = gputrain("logs", *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert b"\x1b" not in proc.stdout and b"\x07" not in proc.stdout and b"\xc2\x9b" not in proc.stdout
    shown = gputrain("logs", str(log), cwd=tmp_path).stdout.decode()
    assert "\\x1b]52;c;cHduZWQ=\\x07" in shown  # visible, so a reader sees what the log tried


def test_special_files_are_refused_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    job = tmp_path / "job"
    job.mkdir()
    os.mkfifo(job / "training_output.log")
    for target in ("/dev/zero", str(fifo)):
        for extra in ([], ["--summary"], ["-f"]):
            proc = gputrain("logs", target, *extra, cwd=tmp_path)
            err = proc.stderr.decode().strip()
            assert proc.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
            assert "not a log file" in err
    for extra in ([], ["--summary"]):  # a FIFO posing as a job's log: never opened (no hang), no traceback
        proc = gputrain("logs", str(job), *extra, cwd=tmp_path)
        assert "Traceback" not in proc.stderr.decode()


def test_terminal_safe_keeps_tabs_and_text() -> None:
    assert terminal_safe("a\tb ünï €") == "a\tb ünï €"
    assert terminal_safe("\x1b[31mred\x9b") == "\\x1b[31mred\\x9b"
    assert safe_data({"headline": "x\x1b]0;t\x07", "rows": ["\r"]}) == {"headline": "x\\x1b]0;t\\x07",
                                                                          "rows": ["\\r"]}
