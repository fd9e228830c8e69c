"""`gputrain submit --sweep`: one job per point of a grid, all planned before any is submitted.

Dry runs need no Slurm, so these run anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RECIPES
from tests.support.cli import gputrain as run_gputrain

PROFILE = "lab:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  gres_type: volta\n  partition: debug\n"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    (tmp_path / "clusters.yaml").write_text(PROFILE)
    (tmp_path / "base.yaml").write_text((RECIPES / "selftest.yaml").read_text())
    (tmp_path / "mine.yaml").write_text("extends: base.yaml\ntrain:\n  max_steps: 3\n")
    return tmp_path


def run_cli(lab: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(lab / "home"), "GPUTRAIN_CONFIG": str(lab / "clusters.yaml")}
    return run_gputrain(*args, cwd=lab, env=env)


def test_sweep_plans_one_job_per_point(lab: Path) -> None:
    args = ("submit", "mine.yaml", "--cluster", "lab", "--dry-run", "--json",
            "--sweep", "train.max_steps=7,9", "--sweep", "train.seed=1,2")
    first = run_cli(lab, *args)
    assert first.returncode == 0, first.stderr
    rows = json.loads(first.stdout)
    assert [r["sweep"] for r in rows] == [["train.max_steps=7", "train.seed=1"], ["train.max_steps=7", "train.seed=2"],
                                          ["train.max_steps=9", "train.seed=1"], ["train.max_steps=9", "train.seed=2"]]
    assert len({r["job_dir"] for r in rows}) == 4  # same second, four folders
    for row in rows:
        train = json.loads((Path(row["job_dir"]) / "plan.json").read_text())["recipe"]["train"]
        assert [f"train.max_steps={train['max_steps']}", f"train.seed={train['seed']}"] == row["sweep"]
        assert "__gputrain_submit_stamp__" not in (Path(row["job_dir"]) / "job.sbatch").read_text()
    text = run_cli(lab, *args[:5], "--sweep", "train.seed=3,4")
    assert "dry run: wrote 2 job folders for one array" in text.stdout and "train.seed=4" in text.stdout


def test_a_sweeps_shared_warning_is_said_once_on_stderr(lab: Path) -> None:
    out = run_cli(lab, "submit", "mine.yaml", "--cluster", "lab", "--dry-run", "--sweep", "train.seed=1,2,3")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("no profile for V100-32GB") == 1
    assert not any(line.startswith("warning:") for line in out.stdout.splitlines())
    assert "dry run: wrote 3 job folders for one array" in out.stdout
    assert "#SBATCH --array=0-2\n" in next((lab / "logs").glob("*_0")).joinpath("job.sbatch").read_text()


@pytest.mark.parametrize(("spec", "message"), [("train.seed", "expected a.b.c=value1,value2"),
                                                ("train.seed=1,,2", "expected a.b.c=value1,value2"),
                                                ("train.max_steps=5,-3", "train.max_steps")])
def test_bad_sweep_is_one_line_and_writes_nothing(lab: Path, spec: str, message: str) -> None:
    out = run_cli(lab, "submit", "mine.yaml", "--cluster", "lab", "--dry-run", "--sweep", spec)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error:") and message in out.stderr, out.stderr
    assert not (lab / "logs").exists()  # the valid first point was not written either


def test_a_dry_runs_script_names_its_own_folder_so_sbatch_can_run_it(lab: Path) -> None:
    """#31.2: the dry run's folder is the one its --output and $JOB_DIR name (a plain `sbatch` of it works)."""
    out = run_cli(lab, "submit", "mine.yaml", "--cluster", "lab", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    job_dir = Path(json.loads(out.stdout)["job_dir"])
    script = (job_dir / "job.sbatch").read_text()
    assert f"#SBATCH --output={job_dir}/training_output.log\n" in script
    assert f"\nJOB_DIR={job_dir}\n" in script and "SLURM_JOB_ID}\"_" not in script
    assert "submit it with sbatch" not in run_cli(lab, "submit", "mine.yaml", "--cluster", "lab", "--dry-run").stdout
