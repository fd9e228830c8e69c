"""Summaries of job folders and plain log files: state, cause, progress, cost, files, incremental reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gputrain.errors import LogError
from gputrain.hardware.catalog import get_gpu
from gputrain.logs import scan as scan_mod
from gputrain.logs.schema import MetricsWriter, format_step_line
from gputrain.logs.summarize import STATE_FILE, summarize
from gputrain.planner import make_plan
from tests.conftest import RECIPES

DATA = Path(__file__).parent / "data" / "logs"
H100_USD = get_gpu("H100").price_usd_hour
T0 = 1_763_700_000.0


def make_job(tmp_path: Path, log: str = "oom_torchrun.log", steps: int = 20) -> Path:
    job = tmp_path / "gnn_coloring_job_42_20261121_100000"
    (job / "checkpoints" / "step_000010").mkdir(parents=True)
    (job / "checkpoints" / "step_000020").mkdir()
    plan = make_plan(RECIPES / "gnn_coloring.yaml", gpu="H100", gpus_per_node=4, nodes=2,
                     overrides=["train.max_steps=100"])
    (job / "plan.json").write_text(plan.to_json())
    with MetricsWriter(job / "metrics.jsonl") as writer:
        for step in range(steps):
            writer.log(step, time=T0 + 36 * step, loss=4.0 / (step + 1), tokens_per_s=1000.0 + step,
                       gpu_mem_gib=20.0 + step)
    shutil.copy(DATA / log, job / "training_output.log")
    return job


def test_failed_job_summary_has_cause_progress_cost_and_files(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    end = T0 + 3600.0
    s = summarize(job, final=True, exit_code=1, now=end)
    assert (s["state"], s["exit_code"], s["cause"]) == ("FAILED", 1, "cuda_oom")
    assert s["failure"].startswith("CUDA out of memory: tried to allocate 2.00 GiB on GPU 1 (79.10 GiB total")
    assert s["traceback"].splitlines()[-1].startswith("torch.OutOfMemoryError")
    assert s["steps"] == {"done": 19, "planned": 100}
    assert s["steps_per_hour"] == pytest.approx(19 / (19 * 36) * 3600)
    assert s["eta_s"] is None  # ended: no ETA
    assert s["duration_s"] == pytest.approx(3600.0)
    assert s["cost"]["gpu_hours"] == pytest.approx(8.0)
    assert s["cost"]["usd"] == pytest.approx(8.0 * H100_USD)
    assert s["peak_gpu_mem_gib"] == 39.0
    assert s["throughput"]["tokens_per_s"] == pytest.approx(1009.5)
    loss = s["metrics"]["loss"]
    assert (loss["first"], loss["last"], loss["best"], loss["best_step"]) == (4.0, 0.2, 0.2, 19)
    assert s["checkpoints"] == ["step_000010", "step_000020"]
    assert s["hardware"]["gpu"] == "H100-80GB"

    on_disk = json.loads((job / "summary.json").read_text())
    assert on_disk["state"] == "FAILED" and on_disk["final"] is True
    text = (job / "job_summary.txt").read_text()
    assert "FAILED (exit 1)" in text and "CUDA out of memory" in text
    assert f"8.00 GPU-h ≈ ${8 * H100_USD:.2f}" in text
    assert "last traceback:" in text
    assert not [p for p in job.iterdir() if p.name.startswith(".") and p.name != STATE_FILE]  # no temp files
    pytest.importorskip("matplotlib")
    assert (job / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_running_job_gets_eta_and_keeps_final_state_once_recorded(tmp_path: Path) -> None:
    job = make_job(tmp_path, log="hf_trainer.log")
    running = summarize(job, state="RUNNING", now=T0 + 1000)
    assert running["state"] == "RUNNING" and running["final"] is False
    assert running["eta_s"] == pytest.approx((100 - 30) / 100 * 3600)  # 100 steps/h; 30 done (from tqdm)
    summarize(job, final=True, exit_code=0, now=T0 + 2000)
    later = summarize(job, now=T0 + 9000)  # an on-demand summary after the job ended
    assert (later["state"], later["exit_code"], later["cause"]) == ("COMPLETED", 0, None)
    assert later["end"] == "2025-11-21T05:13:20Z"


@pytest.mark.parametrize(
    ("log", "code", "state", "cause", "needle"),
    [
        ("time_limit.log", 143, "TIMEOUT", "time_limit", "DUE TO TIME LIMIT"),
        ("preempted.log", 143, "PREEMPTED", "preempted", "DUE TO PREEMPTION"),
        ("keyerror.log", 1, "FAILED", "exception", "KeyError: 'input_idz'"),
        ("killed.log", 137, "FAILED", "host_oom", "OOM killer (SIGKILL, exit 137)"),
    ],
)
def test_failure_causes_of_plain_log_files(log: str, code: int, state: str, cause: str, needle: str) -> None:
    s = summarize(DATA / log, final=True, exit_code=code, write=False)
    assert (s["state"], s["cause"]) == (state, cause)
    assert needle in s["failure"] or needle in (s["traceback"] or "")


def test_preempted_file_and_requeue_exit_code(tmp_path: Path) -> None:
    job = make_job(tmp_path, log="hf_trainer.log")
    assert summarize(job, final=True, exit_code=75)["state"] == "PREEMPTED"
    (job / "PREEMPTED").write_text(json.dumps({"step": 19, "signal": "SIGUSR1", "time": T0}))
    assert summarize(job, final=True, exit_code=1)["state"] == "PREEMPTED"
    assert summarize(job, final=True, exit_code=0)["state"] == "COMPLETED"


def test_other_tools_logs_give_metrics_without_metrics_jsonl() -> None:
    s = summarize(DATA / "verl.log", write=False)
    assert s["steps"]["done"] == 3
    assert s["metrics"]["actor/pg_loss"]["best"] is None  # an RL policy loss has no "best"
    assert s["metrics"]["actor/pg_loss"]["min"] == 0.2
    assert s["metrics"]["critic/score/mean"]["best"] == 0.375  # higher is better for scores
    hf = summarize(DATA / "hf_trainer.log", write=False)
    assert hf["steps"] == {"done": 30, "planned": 30}
    assert hf["metrics"]["loss"]["first"] == 2.5123 and hf["metrics"]["loss"]["last"] == 1.7011


def test_resummarizing_reads_only_appended_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = make_job(tmp_path, log="time_limit.log", steps=2)
    log = job / "training_output.log"
    fed: list[int] = []
    original = scan_mod.LogScanner.scan

    def counting(self: scan_mod.LogScanner) -> int:
        fed.append(original(self))
        return fed[-1]

    monkeypatch.setattr(scan_mod.LogScanner, "scan", counting)
    (job / "metrics.jsonl").unlink()
    first = summarize(job)
    assert sum(fed) == log.stat().st_size
    assert first["metrics"]["loss"]["count"] == 2
    extra = "".join(format_step_line(s, {"loss": 1.0 / s}, 100) + "\n" for s in range(42, 60))
    with log.open("a") as fh:
        fh.write(extra + "step 60/100 | loss 0.0")  # the last line is still being written
    fed.clear()
    second = summarize(job)
    assert sum(fed) == len(extra) + len("step 60/100 | loss 0.0")
    assert second["metrics"]["loss"]["count"] == 20 and second["steps"]["done"] == 59
    with log.open("a") as fh:
        fh.write("100\n")
    third = summarize(job)
    assert third["metrics"]["loss"]["last"] == 0.01 and third["steps"]["done"] == 60
    # Same result as a summary from scratch.
    (job / STATE_FILE).unlink()
    assert summarize(job)["metrics"] == third["metrics"]


def test_truncated_or_replaced_log_is_rescanned_from_the_start(tmp_path: Path) -> None:
    job = make_job(tmp_path, log="time_limit.log", steps=0)
    log = job / "training_output.log"
    assert summarize(job)["steps"]["done"] == 41
    log.write_text("step 3/100 | loss 9.0\n")  # truncated in place
    assert summarize(job)["metrics"]["loss"]["first"] == 9.0
    log.rename(job / "old.log.1")
    log.write_text("step 5/100 | loss 7.0\nstep 6/100 | loss 6.0\nstep 7/100 | loss 6.5\n")
    s = summarize(job)
    assert (s["metrics"]["loss"]["first"], s["steps"]["done"]) == (7.0, 7)


def test_missing_target_is_a_log_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no such job folder or log file"):
        summarize(tmp_path / "nope")


def test_rich_output_shows_log_text_with_brackets_verbatim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gputrain.logs.report import print_rich

    log = tmp_path / "x.log"
    log.write_text("Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad key [/cfg] in [x]\n")
    summary = summarize(log, final=False, exit_code=None, state="FAILED", write=False)
    print_rich(summary)  # a closing tag in the failure line once raised rich.errors.MarkupError
    assert "[/cfg] in [x]" in capsys.readouterr().out


def test_format_first_seen_after_chatter_is_found_by_its_probed_needle(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """nanoGPT lines have neither '{' nor '|': their needle is switched on when a chunk's probe sees one."""
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(scan_mod, "PROBE_BYTES", 16 << 10)
    log = tmp_path / "nanogpt.log"
    chatter = "".join(f"n1:4242:4300 [0] NCCL INFO Channel {i % 24:02d}/24 : 0[0] -> 1[1] via P2P\n"
                      for i in range(3000))
    body = "".join(f"iter {i}: loss {3 - i / 1000:.4f}, time 120.00ms, mfu 30.00%\n" for i in range(1, 1001))
    log.write_text(chatter + body)
    s = summarize(log, write=False)
    assert s["metrics"]["loss"]["count"] == 1000 and s["metrics"]["loss"]["last"] == 2.0
    assert s["steps"]["done"] == 1000


def test_large_dense_log_is_sampled_with_exact_last_values(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(scan_mod, "DENSITY_WINDOW", 16 << 10)
    monkeypatch.setattr(scan_mod, "EXACT_FILE_BYTES", 512 << 10)
    monkeypatch.setattr(scan_mod, "SAMPLE_LINES", 64)
    log = tmp_path / "dense.log"
    lines = [f"step {i}/20000 | loss {5 - i / 10000:.4f} | lr 3.000e-04" for i in range(1, 20001)]
    log.write_text("\n".join(lines) + "\n")
    s = summarize(log, write=False)
    assert s["sampled"]["bytes_skipped"] > 500_000
    loss = s["metrics"]["loss"]
    assert (loss["last"], loss["last_step"], s["steps"]["done"]) == (3.0, 20000, 20000)
    assert loss["first"] == 4.9999 and loss["best"] <= 3.0005  # the minimum is at the end: within the kept lines
    assert loss["count"] < 5000  # sampled, not every line
    assert "sampled (" in __import__("gputrain.logs.report", fromlist=["render_text"]).render_text(s)


def test_large_sparse_log_samples_its_metric_lines_with_exact_ends(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk that is not dense but holds more metric lines than a dense chunk's sample parses that sample."""
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(scan_mod, "DENSITY_WINDOW", 16 << 10)
    monkeypatch.setattr(scan_mod, "EXACT_FILE_BYTES", 512 << 10)
    chatter = "".join(f"n1:4242:4300 [0] NCCL INFO Channel {i:02d}/24 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
                      for i in range(9))
    log = tmp_path / "sparse.log"
    log.write_text("".join(f"{chatter}{{'loss': '{5 - i / 1000:.4f}', 'epoch': '{i / 100:.2f}'}}\n"
                           for i in range(1, 3001)))
    s = summarize(log, write=False)
    loss = s["metrics"]["loss"]
    assert (loss["first"], loss["last"]) == (4.999, 2.0)  # the first line and every chunk's last lines are read
    assert 100 < loss["count"] < 1000 and s["sampled"]["bytes_skipped"] > 50_000


def test_a_plan_json_it_cannot_read_gives_a_summary_without_plan_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job(tmp_path)
    (job / "plan.json").write_text(json.dumps({"recipe": "x", "gpu": "cpu"}))  # another tool's plan.json
    s = summarize(job, final=True, exit_code=1, now=T0 + 3600.0)
    assert (s["state"], s["cause"]) == ("FAILED", "cuda_oom")
    assert s["hardware"] is None and s["cost"]["usd"] is None and s["name"] == job.name
    assert "not a gputrain plan (no schema_version) (summary without plan information)" in capsys.readouterr().err


def test_a_trainings_flags_are_warning_rows_of_the_text_summary(tmp_path: Path) -> None:
    """RL runs flag numbers that rose for the wrong reason in result.json; the summary used to drop them."""
    from gputrain.logs.report import render_text

    (tmp_path / "training_output.log").write_text("step 1 loss 1.0\n")
    flag = "summed reward rose (0.270 -> 0.810) while correctness fell: the gain comes from length"
    (tmp_path / "result.json").write_text(json.dumps({"steps": 1, "flags": [flag]}))
    text = render_text(summarize(tmp_path, final=True, exit_code=0))
    assert any(line.split()[:1] == ["warning"] and flag in line for line in text.splitlines()), text
    (tmp_path / "result.json").write_text(json.dumps({"steps": 1, "flags": []}))
    assert "warning" not in render_text(summarize(tmp_path, final=True, exit_code=0))


_TORCHRUN_ON_SIGTERM = """\
[rank0]: step 3 loss 0.5
Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/torch/distributed/run.py", line 936, in main
    run(args)
  File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 8025 got signal: 15
"""


def test_a_cancelled_job_summary_reads_as_a_cancel_not_a_crash(tmp_path: Path) -> None:
    """#31.3: torchrun dies of the cancel's SIGTERM (exit 1, SignalException); the summary says who cancelled
    it, with no crash cause, remedy or launcher traceback."""
    from gputrain.doctor.remedy import prescribe

    (tmp_path / "training_output.log").write_text(_TORCHRUN_ON_SIGTERM)
    (tmp_path / "CANCELLED").write_text('{"by": "SIGINT", "time": 0}\n')
    summary = summarize(tmp_path, final=True, exit_code=1)
    text = (tmp_path / "job_summary.txt").read_text()
    assert summary["state"] == "CANCELLED" and summary["cause"] == "cancelled"
    assert "cancelled by the user (SIGINT)" in text.splitlines()[0]
    for crash in ("exited with code", "non-zero exit code", "traceback", "SignalException", "exit 1"):
        assert crash not in text, text
    assert summary["traceback"] is None and prescribe(summary, None) is None
