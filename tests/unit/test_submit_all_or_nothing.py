"""#26: a Slurm submission (one job, a ``--sweep`` array, or one job per point) is all or nothing.

Every job folder is written before anything is submitted; a failure after some job went in (a folder name
already taken, Slurm refusing a later point, the registry) cancels every held job, removes their registry
rows and folders, and says in one line what failed and what was cancelled. Nothing runs, nothing is half
written, no row points at a job Slurm no longer has.

The Slurm commands are a real executable first on PATH (``FAKE_SLURM``): a queue file with one line per event
(``4242 held``, ``4242 released``, ``4242 cancelled``), so the tests read what reached "Slurm" and what state each
job was left in. The faults are made the way a user meets them: a ``--logs-dir`` under a regular file, a disk
that fills (``RLIMIT_FSIZE``: a write fails with EFBIG, as on a full disk or quota, and root is not exempt,
unlike ``chmod``), a folder already at a task's path, a QOS limit on the number of submitted jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES
from tests.support.cli import gputrain as run_gputrain

PROFILE = "lab:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  gres_type: volta\n  partition: debug\n"

FAKE_SLURM = r'''#!/usr/bin/env python3
"""Stand-in Slurm: sinfo offers the gres; sbatch queues held jobs; scontrol release / scancel mark them."""
import os, re, sys
from pathlib import Path

state = Path(os.environ["FAKE_SLURM"])
tool, args = Path(sys.argv[0]).name, sys.argv[1:]
queue = state / "queue"
if tool == "sinfo":
    print("gpu:volta:2")
elif tool == "sbatch":
    if args[0] == "--test-only":
        sys.exit(0)
    counter = state / "next"
    job_id = int(counter.read_text()) if counter.exists() else 4242
    if job_id >= int(os.environ.get("FAKE_REFUSE_FROM", "1000000")):
        sys.exit("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job "
                 "violates accounting/QOS policy (job submit limit, user's size and/or time limits)")
    counter.write_text(str(job_id + 1))
    if os.environ.get("FAKE_TAKEN_TASK"):  # someone's folder is already where task N's output goes
        output = re.search(r"^#SBATCH --output=(.*)/[^/]*$", Path(args[-1]).read_text(), re.M).group(1)
        taken = Path(output.replace("%A", str(job_id)).replace("%a", os.environ["FAKE_TAKEN_TASK"]))
        taken.mkdir(parents=True)
        (taken / "theirs.txt").write_text("not gputrain's\n")
    with open(queue, "a") as fh:
        fh.write(f"{job_id} held\n")
    print(job_id)
elif tool == "scontrol" and args[:1] == ["release"]:
    if os.environ.get("FAKE_RELEASE_FAILS"):
        sys.exit("slurm_update error: Socket timed out on send/recv operation")
    with open(queue, "a") as fh:
        fh.writelines(f"{job_id} released\n" for job_id in args[1].split(","))
elif tool == "scancel":
    if os.environ.get("FAKE_SCANCEL_FAILS"):
        sys.exit("scancel: error: Unable to contact slurm controller (connect failure)")
    with open(queue, "a") as fh:
        fh.writelines(f"{a} cancelled\n" for a in args if a != "--")
'''


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    (tmp_path / "clusters.yaml").write_text(PROFILE)
    (tmp_path / "mine.yaml").write_text((RECIPES / "selftest.yaml").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "fake_slurm").write_text(FAKE_SLURM.replace("/usr/bin/env python3", sys.executable, 1))
    (bin_dir / "fake_slurm").chmod(0o755)
    for tool in ("sinfo", "sbatch", "scontrol", "scancel", "squeue", "sacct"):
        (bin_dir / tool).symlink_to("fake_slurm")
    (tmp_path / "state").mkdir()
    return tmp_path


def submit(lab: Path, *args: str, fsize: int | None = None, **fake: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(lab / "home"), "GPUTRAIN_CONFIG": str(lab / "clusters.yaml"),
           "PATH": f"{lab / 'bin'}:{os.environ['PATH']}", "FAKE_SLURM": str(lab / "state"), **fake}
    full = {"RLIMIT_FSIZE": fsize} if fsize is not None else None  # the disk is full for any file past `fsize` bytes
    return run_gputrain("submit", "mine.yaml", "--cluster", "lab", *args, cwd=lab, env=env, rlimits=full)


def queue(lab: Path) -> dict[str, str]:
    """Each job's last event: held, released or cancelled."""
    path = lab / "state" / "queue"
    lines = path.read_text().split("\n") if path.exists() else []
    return dict(line.split(" ", 1) for line in lines if line)


def rows(lab: Path) -> list[str]:
    from gputrain.registry.store import JobRegistry

    db = lab / "home" / "jobs.db"
    return [r.job_id for r in JobRegistry(db).list(None)] if db.exists() else []


def left_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def one_line_error(out: subprocess.CompletedProcess[str], code: int) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


def test_a_taken_task_folder_cancels_the_array_and_keeps_no_row_or_folder(lab: Path) -> None:
    """Before: the array was cancelled, but task 0's row stayed PENDING (forget_jobs keeps unfinished rows)
    pointing at a folder the clean-up had deleted."""
    out = submit(lab, "--sweep", "train.seed=1,2,3", FAKE_TAKEN_TASK="1")
    line = one_line_error(out, 1)
    assert queue(lab) == {"4242": "cancelled"}
    assert rows(lab) == []
    taken = next((lab / "logs").glob("*_job_4242_1_*"))
    assert left_in(lab / "logs") == [taken.name, f"{taken.name}/theirs.txt"]  # theirs, untouched; ours gone
    assert str(taken) in line and "cancelled" in line and "4242" in line


def test_a_point_slurm_refuses_cancels_the_points_already_in_and_none_runs(lab: Path) -> None:
    """--no-array: before, points 1 and 2 were released (they ran) when Slurm refused point 3."""
    out = submit(lab, "--no-array", "--sweep", "train.seed=1,2,3", FAKE_REFUSE_FROM="4244")
    line = one_line_error(out, 1)
    assert queue(lab) == {"4242": "cancelled", "4243": "cancelled"}
    assert rows(lab) == [] and left_in(lab / "logs") == []
    assert "QOS" in line and "cancelled" in line and "4242, 4243" in line


@pytest.mark.parametrize("mode", ["--array", "--dry-run"])  # --no-array stages the same way as --array
def test_a_disk_that_fills_part_way_leaves_no_half_written_folder(lab: Path, mode: str) -> None:
    """Before: the first job folder stayed behind with its checkpoints/ made and no files (a hidden
    .staging_* folder for a submit, the dry run's own folder for --dry-run)."""
    out = submit(lab, mode, "--sweep", "train.seed=1,2", fsize=1024)
    assert left_in(lab / "logs") == [] and queue(lab) == {} and rows(lab) == []
    line = one_line_error(out, 1)
    assert f"in {lab / 'logs'}: File too large" in line
    assert ("nothing was written" if mode == "--dry-run" else "nothing was submitted") in line


@pytest.mark.parametrize("mode", ["--no-array", "--dry-run"])
def test_a_logs_dir_that_cannot_be_a_folder_is_exit_2_naming_it(lab: Path, mode: str) -> None:
    """Before: exit 1, naming a hidden staging folder rather than the --logs-dir the user gave."""
    (lab / "afile").write_text("")
    out = submit(lab, mode, "--sweep", "train.seed=1,2", "--logs-dir", "afile/logs")
    line = one_line_error(out, 2)
    assert f"--logs-dir {lab / 'afile' / 'logs'}" in line and "Not a directory" in line and ".staging" not in line
    assert queue(lab) == {} and rows(lab) == []


def test_a_release_that_fails_cancels_every_job_and_keeps_no_row_or_folder(lab: Path) -> None:
    """Before: the first point's release failed, it was cancelled but its folder and a CANCELLED row stayed."""
    out = submit(lab, "--no-array", "--sweep", "train.seed=1,2", FAKE_RELEASE_FAILS="1")
    line = one_line_error(out, 1)
    assert queue(lab) == {"4242": "cancelled", "4243": "cancelled"}
    assert rows(lab) == [] and left_in(lab / "logs") == []
    assert "scontrol release failed: slurm_update error" in line and "cancelled the job(s) 4242, 4243" in line


def test_a_cancel_that_fails_says_which_held_jobs_are_left_and_how_to_remove_them(lab: Path) -> None:
    out = submit(lab, "--sweep", "train.seed=1,2", FAKE_TAKEN_TASK="1", FAKE_SCANCEL_FAILS="1")
    line = one_line_error(out, 1)
    assert queue(lab) == {"4242": "held"}  # held: it never starts; the user is told
    assert "`scancel 4242`" in line and "Unable to contact slurm controller" in line
    assert rows(lab) == []


def test_a_sweep_that_goes_in_is_released_and_recorded(lab: Path) -> None:
    """The happy path through the same stand-in: every point held, placed, recorded, then released."""
    out = submit(lab, "--no-array", "--json", "--sweep", "train.seed=1,2")
    assert out.returncode == 0, out.stderr
    subs = json.loads(out.stdout)
    assert queue(lab) == {"4242": "released", "4243": "released"}
    assert sorted(rows(lab)) == ["4242", "4243"]
    assert all((Path(s["job_dir"]) / "plan.json").is_file() for s in subs)
    assert [p for p in (lab / "logs").iterdir() if p.name.startswith(".")] == []
