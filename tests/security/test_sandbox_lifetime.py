"""Sandbox processes die with a trainer killed by SIGKILL (issue #25, point 7), at every level.

The trainer side scores a program that daemonizes (double fork, new session) and then spins; once both
are seen running (they name themselves through ``prctl(PR_SET_NAME)``) the trainer is SIGKILLed. Every
process it had started, the daemon included, must be gone soon after, with no cleanup by the trainer.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from gputrain.train.sandbox.process import descendants
from tests.security.sandbox_levels import LEVELS, Level, run_level

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


@pytest.mark.parametrize("level", LEVELS, ids=[lv.name for lv in LEVELS])
def test_sandbox_processes_die_with_a_sigkilled_trainer(level: Level, portable_packages: Path) -> None:
    trainer = run_level(level, portable_packages, "hang", popen=True)
    try:
        started: list[int] = []
        for _ in range(600):  # the names appear once the program runs; not a timing assertion
            started = descendants(trainer.pid)
            names = {_comm(pid) for pid in started}
            if {"gpt-sbx-prog", "gpt-sbx-daemon"} <= names:
                break
            assert trainer.poll() is None, trainer.communicate()[1][-2000:]
            time.sleep(0.1)
        else:
            pytest.fail(f"the program never started: {sorted(names)}")
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait()
        for _ in range(200):
            left = [pid for pid in started if _alive(pid)]
            if not left:
                break
            time.sleep(0.05)
        assert not left, f"{level.name}: outlived the trainer: {[(p, _comm(p)) for p in left]}"
    finally:
        if trainer.poll() is None:
            trainer.kill()
        for pid in descendants(trainer.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(trainer.home, ignore_errors=True)
