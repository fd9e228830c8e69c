"""#25.14 — ``gputrain logs DIR`` on a job folder planted by someone else (a pod's salvage, a shared folder).

The attacks: ``result.json`` / ``summary.json`` / ``plan.json`` as a link to ``/dev/zero`` (reading never
ends: MemoryError), and one line of 50 000 nested brackets (RecursionError). Each was a traceback; now the
file is ignored with one warning line and the log is still shown and summarized (exit 0). The CLI runs
under a 2 GiB address-space limit so that the /dev/zero case fails fast on the old tree instead of eating
the machine's memory.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "gputrain.cli.main"]
DEEP = "[" * 50_000 + "]" * 50_000 + "\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "training_output.log").write_text("step 1 loss 2.0\nstep 2 loss 1.5\n")
    return job


def _logs(job: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(job.parent / "home")}
    return subprocess.run([*CLI, "logs", str(job), *extra], capture_output=True, text=True, env=env, timeout=120,
                          preexec_fn=_limit_memory, check=False)


def _plant(job: Path, name: str, how: str) -> None:
    if how == "dev_zero":
        (job / name).symlink_to("/dev/zero")
    else:
        (job / name).write_text(DEEP)


@pytest.mark.slow
@pytest.mark.parametrize("swap", [False, True])
def test_hostile_result_and_plan_files_are_ignored_with_a_warning(tmp_path: Path, swap: bool) -> None:
    job = _job(tmp_path)
    _plant(job, "result.json", "deep" if swap else "dev_zero")
    _plant(job, "plan.json", "dev_zero" if swap else "deep")
    proc = _logs(job, "--summary")
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "loss" in proc.stdout  # the log itself is still summarized
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert any("result.json" in w for w in warnings) and any("plan.json" in w for w in warnings), proc.stderr


@pytest.mark.parametrize("how", ["dev_zero", "deep"])
def test_a_hostile_summary_never_ends_or_crashes_the_follow(tmp_path: Path, how: str) -> None:
    """``logs -f`` polls summary.json for the job's end: a hostile one is not an end, and not a crash."""
    job = _job(tmp_path)
    _plant(job, "summary.json", how)
    code = ("import sys; from pathlib import Path; from gputrain.cli.logs import job_finished;"
            "print(job_finished(Path(sys.argv[1]), None)())")
    proc = subprocess.run([sys.executable, "-c", code, str(job)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit_memory, check=False)  # the old tree read /dev/zero to MemoryError
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_json_reader_refuses_links_specials_oversize_and_depth(tmp_path: Path) -> None:
    from gputrain.logs.jsonfile import read_json_object

    good = tmp_path / "good.json"
    good.write_text('{"ok": 1}')
    assert read_json_object(good) == {"ok": 1}
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert read_json_object(link, warn=False) is None  # never followed, even to a harmless file
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert read_json_object(fifo, warn=False) is None  # opening does not block
    big = tmp_path / "big.json"
    big.write_text('{"x": "' + "a" * 2000 + '"}')
    assert read_json_object(big, warn=False, max_bytes=1000) is None
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    assert read_json_object(deep, warn=False) is None
