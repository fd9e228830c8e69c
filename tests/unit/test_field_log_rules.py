"""The rules behind the field-log corpus, one behaviour per test (#30): what a bare log file shows on its own.

Every log here is a file from ``tests/fixtures/field_logs/`` (real output, source in its truth file), pointed at
the way a user would: ``gputrain logs FILE --summary`` / ``--fix`` with no job folder, plan or registry entry.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gputrain.cli.logs import register
from gputrain.doctor import prescribe
from gputrain.logs.prefixes import normalize
from gputrain.logs.summarize import summarize

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "field_logs"


@pytest.fixture()
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    application = typer.Typer()
    register(application)

    @application.command("noop")
    def noop() -> None:
        pass

    return application


def test_a_bare_log_ending_in_an_oom_traceback_is_failed_with_a_remedy() -> None:
    s = summarize(CORPUS / "issue_trl_grpo_oom_rank0.log", write=False)
    assert s["state"] == "FAILED" and s["state_inferred"] is True
    assert "CUDA out of memory" in s["failure"] and "(rank 0)" in s["failure"]
    remedy = prescribe(s, None)
    assert remedy is not None and "train.batch_size" in remedy.text and "gradient checkpointing" in remedy.text
    assert "--fit" in remedy.text


def test_slurm_time_limit_in_a_bare_log_is_timeout_and_says_it_was_inferred() -> None:
    s = summarize(CORPUS / "issue_slurm_step_time_limit_tasks.log", write=False)
    assert (s["state"], s["cause"], s["state_inferred"]) == ("TIMEOUT", "time_limit", True)
    assert "DUE TO TIME LIMIT" in s["state_evidence"]
    remedy = prescribe(s, None)
    assert remedy is not None and "--time" in remedy.text and "requeue" in remedy.text


def test_sigkill_of_a_rank_reads_as_the_host_oom_killer() -> None:
    s = summarize(CORPUS / "own_torchrun_sigkill.log", write=False)
    assert s["failure"].startswith("rank 1 killed by SIGKILL, likely the host's OOM killer")
    assert s["cause"] == "host_oom"
    remedy = prescribe(s, None)
    assert remedy is not None and "--mem" in remedy.text and "num_workers" in remedy.text


def test_the_first_failing_rank_wins_over_the_consequences_on_other_ranks() -> None:
    # rank 1 raised; rank 0 then failed with gloo "Connection closed by peer"; torchrun's box came last
    s = summarize(CORPUS / "own_torchrun_valueerror.log", write=False)
    assert s["failure"].startswith("ValueError: batch 6 has 7 columns, expected 8 (rank 1")


def test_ray_task_error_is_the_cause_line_not_the_reraise() -> None:
    s = summarize(CORPUS / "issue_verl_raytaskerror.log", write=False)
    assert s["failure"].startswith("ray.exceptions.RayTaskError(OSError): ray::TaskRunner.run()")


@pytest.mark.parametrize(("log", "needle"), [("issue_vllm_fatal_nightly.log", "vLLM engine died"),
                                             ("issue_vllm_enginedead_kimi.log", "EngineDeadError")])
def test_vllm_engine_death_is_recognised(log: str, needle: str) -> None:
    s = summarize(CORPUS / log, write=False)
    assert s["state"] == "FAILED" and needle in s["failure"] and s["cause"] == "vllm_engine"


def test_nan_in_any_metric_is_a_headline_and_never_best_zero() -> None:
    s = summarize(CORPUS / "own_plain_nan.log", write=False)
    loss, grad = s["metrics"]["loss"], s["metrics"]["grad_norm"]
    assert loss["nonfinite"] == 5 and math.isnan(loss["last"]) and loss["best"] == pytest.approx(0.2857)
    assert grad["nonfinite_first_step"] == 7
    assert any(a.startswith("loss went NaN at step 8") for a in s["alerts"])
    assert any(a.startswith("grad_norm went Inf at step 7") for a in s["alerts"])
    only_nan = summarize(CORPUS / "issue_tf_epoch_loss_nan.log", write=False)["metrics"]["loss"]
    assert only_nan["best"] != 0 and only_nan["nonfinite"] == 8


def test_a_completed_hf_run_with_nan_grad_norm_is_completed_but_flagged() -> None:
    s = summarize(CORPUS / "own_hf_trainer_nan.log", write=False)
    assert s["state"] == "COMPLETED" and s["failure"] is None
    assert s["alerts"] and s["alerts"][0].startswith("grad_norm went NaN")


def test_prefixes_of_launchers_loggers_and_viewers_come_off() -> None:
    assert normalize("[default1]:[rank1]: torch.OutOfMemoryError: x") == (1, "torch.OutOfMemoryError: x")
    assert normalize("3: RuntimeError: y") == (3, "RuntimeError: y")
    assert normalize("(APIServer pid=1) ERROR 05-12 01:48:42 [api_router.py:72] vllm.E: z")[1] == "vllm.E: z"
    assert normalize("E1126 05:59:23.239000 11494 api.py:1002] failed (exitcode: 1)")[1] == "failed (exitcode: 1)"
    assert normalize("[80746] [rank4]:[E321 02:07:08.41 ProcessGroupNCCL.cpp:607] [Rank 4] W") == (4, "[Rank 4] W")


def test_fix_works_on_a_bare_log_file(app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["logs", str(CORPUS / "issue_slurm_oom_kill_batch.log"), "--fix"])
    assert result.exit_code == 0, result.output
    assert "OOM killer" in result.output and "fix:" in result.output and "--mem" in result.output
    as_json = CliRunner().invoke(app, ["logs", str(CORPUS / "issue_cuda_oom_old_format.log"), "--fix", "--json"])
    data = json.loads(as_json.output)
    assert data["state"] == "FAILED" and "batch" in data["remedy"]["text"] and data["command"] is None


def test_summary_of_a_bare_log_shows_the_inferred_state_alerts_and_fix(app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["logs", str(CORPUS / "issue_slurm_time_limit_canu.log"), "--summary"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert "TIMEOUT (inferred from the log)" in first
    assert "fix" in result.output and "resources.time" in result.output
    nan = CliRunner().invoke(app, ["logs", str(CORPUS / "issue_mmengine_grad_norm_nan.log"), "--summary"])
    assert "grad_norm went NaN" in nan.output


def test_an_error_the_run_went_on_after_is_not_the_cause(tmp_path: Path) -> None:
    # real pieces joined: a traceback transformers printed (own_hf_resume_missing), then the loop's later steps
    # (own_plain_nan), then the shell's "Killed" (own_bash_killed): the run died of the kill, not the old error
    traceback = (CORPUS / "own_hf_resume_missing.log").read_text().split("                    ")[0]
    steps = (CORPUS / "own_plain_nan.log").read_text()
    killed = (CORPUS / "own_bash_killed.log").read_text().splitlines()[-2]
    log = tmp_path / "joined.log"
    log.write_text(traceback + "\n" + steps + killed + "\n")
    s = summarize(log, write=False)
    assert s["state"] == "FAILED" and "killed by SIGKILL" in s["failure"] and s["cause"] == "host_oom"
    log.write_text(traceback + "\n" + steps)  # no kill: the run went on after the error and its end is unknown
    assert summarize(log, write=False)["state"] == "UNKNOWN"


@pytest.mark.parametrize(("line", "state", "cause"), [
    ("=>> PBS: job killed: walltime 3622 exceeded limit 3600", "TIMEOUT", "time_limit"),
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "TIMEOUT", "time_limit"),
    ("Segmentation fault (core dumped)", "FAILED", "signal"),
    ("[Tue Nov 26 05:59:23 2026] Out of memory: Killed process 4242 (python3)", "FAILED", "host_oom"),
])
def test_other_schedulers_and_crashes_end_a_log(tmp_path: Path, line: str, state: str, cause: str) -> None:
    log = tmp_path / "x.log"
    log.write_text((CORPUS / "own_torchrun_valueerror.log").read_text().split("[rank1]")[0] + line + "\n")
    s = summarize(log, write=False)
    assert (s["state"], s["cause"]) == (state, cause)


@pytest.mark.parametrize("prefix", [
    "",
    "[2026-11-21 10:00:00] ",  # the timestamp prefix once took "Signal" for a logger level and ate it
    "[2026-11-21 10:00:00,123] ",
    "W1121 10:00:00.000000 4200 torch/distributed/elastic/agent/server/api.py:704] ",
    "[rank0]:",
])
def test_a_lone_sigkill_line_outside_torchruns_box_is_failed_by_the_oom_killer(tmp_path: Path, prefix: str) -> None:
    log = tmp_path / "x.log"
    log.write_text(f"step 1/100 | loss 2.3\n{prefix}Signal 9 (SIGKILL) received by PID 4242\n")
    s = summarize(log, write=False)
    assert (s["state"], s["state_inferred"], s["cause"]) == ("FAILED", True, "host_oom")
    assert "killed by SIGKILL, likely the host's OOM killer" in s["failure"]
