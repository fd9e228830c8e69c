"""`gputrain logs`: targets by path or registry, --summary/--json/--final, filters, clear errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gputrain.cli.logs import register
from gputrain.errors import LogError
from gputrain.planner import make_plan
from tests.conftest import RECIPES
from tests.support.cli import gputrain as run_gputrain

DATA = Path(__file__).parent / "data" / "logs"


@pytest.fixture()
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    application = typer.Typer()
    register(application)

    @application.command("noop")
    def noop() -> None:  # a second command keeps `logs` a sub-command, as under the real main app
        pass

    return application


def job_dir(tmp_path: Path, log: str = "oom_torchrun.log") -> Path:
    job = tmp_path / "selftest_job_7_20261121_100000"
    job.mkdir()
    (job / "plan.json").write_text(make_plan(RECIPES / "selftest.yaml", gpu="cpu", gpus_per_node=2).to_json())
    shutil.copy(DATA / log, job / "training_output.log")
    return job


def test_final_summary_is_written_and_printed_without_colour(app: typer.Typer, tmp_path: Path) -> None:
    job = job_dir(tmp_path)
    result = CliRunner().invoke(app, ["logs", str(job), "--summary", "--final", "--exit-code", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("selftest  FAILED (exit 1) — CUDA out of memory")
    assert "\x1b[" not in result.output
    assert json.loads((job / "summary.json").read_text())["cause"] == "cuda_oom"
    assert (job / "job_summary.txt").read_text() == result.output


def test_json_output_parses(app: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["logs", str(DATA / "verl.log"), "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["steps"]["done"] == 3 and "actor/pg_loss" in data["metrics"]


def test_json_path_does_not_import_rich(tmp_path: Path) -> None:
    code = (
        "import sys, typer\n"
        "from gputrain.cli.logs import register\n"
        "app = typer.Typer(); register(app); app.command('noop')(lambda: None)\n"
        f"try:\n    app(['logs', {str(DATA / 'hf_trainer.log')!r}, '--json'])\n"
        "except SystemExit:\n    pass\n"
        "assert 'rich' not in sys.modules, 'rich imported'\n"
        "assert 'matplotlib' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["steps"]["done"] == 30


def test_last_lines_grep_and_rank(app: typer.Typer, tmp_path: Path) -> None:
    job = job_dir(tmp_path)
    runner = CliRunner()
    tail = runner.invoke(app, ["logs", str(job), "-n", "2"])
    assert tail.output.splitlines() == [
        "E1121 10:02:02.000000 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 1 (pid: 4243) of binary: /usr/bin/python3",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    grep = runner.invoke(app, ["logs", str(job), "--rank", "0", "--grep", r"step \d+/"])
    assert grep.output.splitlines() == [
        "[rank0]: step 10/100 | loss 2.1000 | lr 3.000e-04 | tokens_per_s 51234",
        "[rank0]: step 11/100 | loss 2.0500 | lr 3.000e-04 | tokens_per_s 50990",
    ]


def test_job_found_through_the_registry(app: typer.Typer, tmp_path: Path) -> None:
    from gputrain.registry.store import JobRecord, JobRegistry

    job = job_dir(tmp_path, log="time_limit.log")
    JobRegistry().add(JobRecord(job_id="4242", backend="slurm", name="selftest", job_dir=str(job),
                                state="TIMEOUT"))
    result = CliRunner().invoke(app, ["logs", "4242", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["state"], data["cause"], data["steps"]["done"]) == ("TIMEOUT", "time_limit", 41)
    followed = CliRunner().invoke(app, ["logs", "4242", "-f", "-n", "1"])  # the job ended: follow returns
    assert followed.output.startswith("slurmstepd: error: *** JOB 4242")
    assert "selftest  TIMEOUT" in followed.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["logs", "no-such-job"], "no-such-job: no such file, folder or job"),
        (["logs", str(DATA / "verl.log"), "--grep", "("], "invalid regular expression"),
        (["logs", str(DATA / "verl.log"), "--final"], "--final needs --exit-code"),
    ],
)
def test_bad_input_is_a_one_line_log_error(app: typer.Typer, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, LogError)
    assert message in str(result.exception) and "\n" not in str(result.exception)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def test_pending_job_says_pending_and_why(app: typer.Typer, tmp_path: Path) -> None:
    from gputrain.registry.store import JobRecord, JobRegistry

    JobRegistry().add(JobRecord(job_id="local-77", backend="local", name="gnn", state="PENDING",
                                extra={"reason": "Resources"}))
    for args in (["logs", "local-77"], ["logs", "local-77", "-f"], ["logs", "local-77", "--summary"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.output == "job local-77 is PENDING (Resources): no output yet\n"


def test_job_without_output_yet_says_so(app: typer.Typer, tmp_path: Path) -> None:
    from gputrain.registry.store import JobRecord, JobRegistry

    job = tmp_path / "gnn_job_8"
    job.mkdir()
    (job / "training_output.log").write_text("")  # the job started; nothing printed yet
    JobRegistry().add(JobRecord(job_id="local-8", backend="local", name="gnn", state="RUNNING", job_dir=str(job)))
    result = CliRunner().invoke(app, ["logs", "local-8"])
    assert result.exit_code == 0 and result.output == "local-8: no output yet (RUNNING)\n"


def test_rank_beyond_world_size_is_a_one_line_error_exit_2(tmp_path: Path) -> None:
    job = tmp_path / "crash_job_3"
    job.mkdir()
    shutil.copy(FIXTURES / "torchrun_crash.log", job / "training_output.log")
    (job / "plan.json").write_text(json.dumps({"recipe": "crash", "world_size": 2}))
    env = {**__import__("os").environ, "GPUTRAIN_HOME": str(tmp_path / "home")}
    cmd = ["logs", str(job), "--rank", "5"]
    out = run_gputrain(*cmd, env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "error: --rank 5: job has 2 rank(s), 0-1\n"
    ok = run_gputrain(*cmd[:-1], "1", "--grep", "RuntimeError", env=env)
    # rank 1's lines, by the launcher's [default1]: prefix (torch's own [rank1]: tag is inside it)
    assert ok.returncode == 0 and ok.stdout.splitlines() == [
        "[default1]:[rank1]:     raise RuntimeError(f\"simulated failure: loss became NaN at step {step}\")",
        "[default1]:[rank1]: RuntimeError: simulated failure: loss became NaN at step 25",
    ]


def test_follow_prints_the_final_summary_once(app: typer.Typer, tmp_path: Path) -> None:
    """The job script prints its final summary into the log being followed: -f must not print it again."""
    job = job_dir(tmp_path, log="time_limit.log")
    summary = CliRunner().invoke(app, ["logs", str(job), "--summary", "--final", "--exit-code", "143"]).output
    with (job / "training_output.log").open("a") as fh:
        fh.write(summary)  # what the job script's `gputrain logs --summary --final` adds to its output
    followed = CliRunner().invoke(app, ["logs", str(job), "-f", "-n", "100"])
    assert followed.exit_code == 0, followed.output
    headline = summary.splitlines()[0]
    assert followed.output.count(headline) == 1
    (tmp_path / "other").mkdir()
    fresh = job_dir(tmp_path / "other", log="time_limit.log")
    CliRunner().invoke(app, ["logs", str(fresh), "--summary", "--final", "--exit-code", "143"])
    again = CliRunner().invoke(app, ["logs", str(fresh), "-f", "-n", "5"])  # summary not in the log: printed
    assert again.output.count(headline.split("  ")[0] + "  TIMEOUT") == 1
