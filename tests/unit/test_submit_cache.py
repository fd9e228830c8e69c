"""`gputrain submit` replays an identical earlier command's prepared job, and only while nothing changed.

Dry runs need no Slurm, so these run anywhere. A replay is told apart from a fresh plan by what the
process imported: the replay never loads Typer, pydantic or Jinja (that is its point).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputrain.cli import submit_cache

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "lab:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  gres_type: volta\n  partition: debug\n"
PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['gputrain', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('gputrain.cli.main', run_name='__main__')\n"
    "finally:\n"
    "    planned = [m for m in ('typer', 'pydantic', 'jinja2') if m in sys.modules]\n"
    "    sys.stderr.write('PLANNED=' + ','.join(planned) + '\\n')\n"
)


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    (tmp_path / "clusters.yaml").write_text(PROFILE)
    base = (ROOT / "recipes" / "selftest.yaml").read_text()
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "mine.yaml").write_text("extends: base.yaml\ntrain:\n  max_steps: 3\n")
    return tmp_path


def submit(lab: Path, *args: str, env: dict[str, str] | None = None) -> tuple[bool, Path, str]:
    """(replayed?, job folder, stderr) of one dry-run submit in ``lab``."""
    full_env = {**os.environ, "GPUTRAIN_HOME": str(lab / "home"), "GPUTRAIN_CONFIG": str(lab / "clusters.yaml")}
    full_env.pop("GPUTRAIN_SUBMIT_CACHE", None)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "submit", *args, "--cluster", "lab", "--dry-run", "--json"],
        cwd=lab, env=full_env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    planned = re.search(r"PLANNED=(.*)", proc.stderr)
    assert planned is not None
    return planned.group(1) == "", Path(json.loads(proc.stdout)["job_dir"]), proc.stderr


def unstamped(job_dir: Path) -> str:
    return re.sub(r"\d{8}_\d{6}", "STAMP", (job_dir / "job.sbatch").read_text())


def test_identical_command_is_replayed_with_identical_files(lab: Path) -> None:
    replayed, first, _ = submit(lab, "mine.yaml")
    assert not replayed
    planned = {name: (first / name).read_text() for name in ("plan.json", "recipe.resolved.yaml")}
    script = unstamped(first)
    replayed, second, _ = submit(lab, "mine.yaml")
    assert replayed
    assert unstamped(second) == script
    assert {name: (second / name).read_text() for name in planned} == planned
    # the stamp is filled in, and names the replay's own folder
    script = (second / "job.sbatch").read_text()
    assert "__gputrain_submit_stamp__" not in script
    stamp = second.name.rsplit("_job_dryrun_", 1)[1].split("-")[0]
    assert f"_{stamp}" in script


def test_warnings_are_replayed_too(lab: Path) -> None:
    args = ("mine.yaml", "--set", "train.max_steps=4")
    full_env = {**os.environ, "GPUTRAIN_HOME": str(lab / "home"), "GPUTRAIN_CONFIG": str(lab / "clusters.yaml")}
    outs = [subprocess.run([sys.executable, "-m", "gputrain.cli.main", "submit", *args, "--cluster", "lab",
                            "--dry-run"], cwd=lab, env=full_env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    assert "no profile for V100-32GB" in outs[0].stderr
    assert outs[0].stderr == outs[1].stderr
    folder = re.compile(r"\d{8}_\d{6}(-\d+)?")
    assert folder.sub("", outs[0].stdout) == folder.sub("", outs[1].stdout)
    assert "(1 node(s) x 2 V100-32GB on lab)" in outs[1].stdout


@pytest.mark.parametrize("change", ["recipe", "extended", "profiles", "shadowing file", "other args"])
def test_any_changed_input_plans_again(lab: Path, change: str) -> None:
    submit(lab, "mine.yaml")
    arg = "mine.yaml"
    if change == "recipe":
        (lab / "mine.yaml").write_text("extends: base.yaml\ntrain:\n  max_steps: 5\n")
    elif change == "extended":
        (lab / "base.yaml").write_text((lab / "base.yaml").read_text() + "\n# edited\n")
    elif change == "profiles":
        (lab / "clusters.yaml").write_text(PROFILE.replace("partition: debug", "partition: gpu"))
    elif change == "shadowing file":  # a bundled name first: then a file of that name appears here
        submit(lab, "selftest")
        (lab / "selftest").write_text((lab / "mine.yaml").read_text())
        arg = "selftest"
    else:
        arg = "mine.yaml"
    extra = ("--nodes", "2") if change == "other args" else ()
    replayed, job_dir, _ = submit(lab, arg, *extra)
    assert not replayed
    plan = json.loads((job_dir / "plan.json").read_text())
    if change == "recipe":
        assert plan["recipe"]["train"]["max_steps"] == 5
    elif change == "profiles":
        assert plan["cluster"]["partition"] == "gpu"
    elif change == "shadowing file":
        assert plan["recipe_path"] == "selftest" and plan["recipe"]["train"]["max_steps"] == 3
    elif change == "other args":
        assert plan["nodes"] == 2
    assert submit(lab, arg, *extra)[0]  # and the new plan is then replayed


def test_changed_gputrain_plans_again(lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    submit(lab, "mine.yaml")
    monkeypatch.setenv("GPUTRAIN_HOME", str(lab / "home"))
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(lab / "clusters.yaml"))
    monkeypatch.chdir(lab)
    argv = ["mine.yaml", "--cluster", "lab", "--dry-run", "--json"]
    assert submit_cache.lookup(argv) is not None
    monkeypatch.setattr(submit_cache, "package_fingerprint", lambda: "another build")
    assert submit_cache.lookup(argv) is None


def test_package_fingerprint_sees_an_edited_file(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    rows: list[str] = []
    submit_cache._walk(str(tmp_path), rows)
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled")
    again: list[str] = []
    submit_cache._walk(str(tmp_path), again)
    assert rows == again  # bytecode does not count
    (tmp_path / "pkg" / "a.py").write_text("x = 22\n")
    edited: list[str] = []
    submit_cache._walk(str(tmp_path), edited)
    assert edited != rows


@pytest.mark.parametrize("how", ["--no-cache", "GPUTRAIN_SUBMIT_CACHE=0", "corrupt entry"])
def test_reuse_can_be_turned_off_and_a_bad_entry_is_ignored(lab: Path, how: str) -> None:
    submit(lab, "mine.yaml")
    args: tuple[str, ...] = ("mine.yaml",)
    env = None
    if how == "--no-cache":
        submit(lab, "mine.yaml", "--no-cache")
        args = ("mine.yaml", "--no-cache")
    elif how.startswith("GPUTRAIN"):
        env = {"GPUTRAIN_SUBMIT_CACHE": "0"}
    else:
        for entry in (lab / "home" / "cache" / "submit").glob("*.json"):
            entry.write_text('{"version": 1, "inputs": {}, "package": ')
    replayed, job_dir, stderr = submit(lab, *args, env=env)
    assert not replayed and "Traceback" not in stderr
    assert (job_dir / "job.sbatch").is_file()


def test_plans_that_detect_the_local_gpu_are_not_kept(lab: Path) -> None:
    (lab / "clusters.yaml").write_text("lab:\n  gpus_per_node: 2\n  partition: debug\n")
    submit(lab, "mine.yaml")
    assert not list((lab / "home" / "cache" / "submit").glob("*.json"))
    assert not submit(lab, "mine.yaml")[0]


def test_entries_are_pruned_oldest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submit_cache, "KEEP", 3)
    for i in range(5):
        entry = tmp_path / f"{i}.json"
        entry.write_text("{}")
        os.utime(entry, ns=(i * 10**9, i * 10**9))
    submit_cache._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["2.json", "3.json", "4.json"]


def run_cli(lab: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(lab / "home"), "GPUTRAIN_CONFIG": str(lab / "clusters.yaml")}
    return subprocess.run([sys.executable, "-m", "gputrain.cli.main", *args], cwd=lab, env=env,
                          capture_output=True, text=True, timeout=120)


def test_sweep_plans_one_job_per_point_and_replays_them(lab: Path) -> None:
    args = ("submit", "mine.yaml", "--cluster", "lab", "--dry-run", "--json",
            "--sweep", "train.max_steps=7,9", "--sweep", "train.seed=1,2")
    first = run_cli(lab, *args)
    assert first.returncode == 0, first.stderr
    rows = json.loads(first.stdout)
    assert [r["sweep"] for r in rows] == [["train.max_steps=7", "train.seed=1"], ["train.max_steps=7", "train.seed=2"],
                                          ["train.max_steps=9", "train.seed=1"], ["train.max_steps=9", "train.seed=2"]]
    assert len({r["job_dir"] for r in rows}) == 4  # same second, four folders
    for row in rows:
        config = json.loads((Path(row["job_dir"]) / "plan.json").read_text())["recipe"]
        train = config["train"]
        assert [f"train.max_steps={train['max_steps']}", f"train.seed={train['seed']}"] == row["sweep"]
    again = run_cli(lab, *args)
    assert [r["sweep"] for r in json.loads(again.stdout)] == [r["sweep"] for r in rows]
    text = run_cli(lab, *args[:5], "--sweep", "train.seed=3,4")
    assert text.stdout.count("dry run: wrote") == 2 and "train.seed=4" in text.stdout


@pytest.mark.parametrize(("spec", "message"), [("train.seed", "expected a.b.c=value1,value2"),
                                                ("train.seed=1,,2", "expected a.b.c=value1,value2"),
                                                ("train.max_steps=5,-3", "train.max_steps")])
def test_bad_sweep_is_one_line_and_writes_nothing(lab: Path, spec: str, message: str) -> None:
    out = run_cli(lab, "submit", "mine.yaml", "--cluster", "lab", "--dry-run", "--sweep", spec)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error:") and message in out.stderr, out.stderr
    assert not (lab / "logs").exists()  # the valid first point was not written either
