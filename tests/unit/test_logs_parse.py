"""Line parsers: each format a person may point `gputrain logs` at, and text that must stay text."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.logs.classify import classify_failure, classify_line, signal_name
from gputrain.logs.parse import LogParser, parse_line
from gputrain.logs.schema import format_step_line

DATA = Path(__file__).parent / "data" / "logs"


def records(name: str) -> list:
    parser = LogParser()
    out = []
    for line in (DATA / name).read_bytes().decode("utf-8").split("\n"):
        out += parser.feed(line)
    return out + parser.flush()


def test_hf_trainer_dict_lines_map_learning_rate_to_lr() -> None:
    metrics = [r for r in records("hf_trainer.log") if r.kind == "metrics"]
    assert [r.fmt for r in metrics] == ["hf"] * 5
    assert metrics[0].values == {"loss": 2.5123, "grad_norm": 3.21, "lr": 4.5e-05, "epoch": 0.33}
    assert metrics[2].values["eval_loss"] == 1.85
    progress = [r for r in records("hf_trainer.log") if r.kind == "progress"]
    assert (progress[-1].step, progress[-1].total, progress[-1].values["steps_per_s"]) == (30, 30, 2.4)


def test_verl_step_lines_with_ray_prefix_and_numpy_reprs() -> None:
    metrics = [r for r in records("verl.log") if r.kind == "metrics"]
    assert [r.step for r in metrics] == [1, 2, 3]
    assert all(r.fmt == "verl" for r in metrics)
    assert metrics[0].values["actor/pg_loss"] == 0.412
    assert metrics[2].values["actor/pg_loss"] == 0.2
    assert metrics[2].values["critic/score/mean"] == 0.375


def test_lightning_bars_give_global_step_and_postfix_metrics_skipping_validation() -> None:
    recs = records("lightning.log")
    train = [r for r in recs if r.fmt == "lightning"]
    # The carriage-return line yields its last update only.
    assert [(r.step, r.values["train_loss"]) for r in train] == [(10, 0.7), (20, 0.5)]
    assert train[1].values["epoch"] == 1.0
    assert any(r.kind == "text" and r.text.startswith("Validation") for r in recs)


def test_tqdm_seconds_per_iteration_is_inverted() -> None:
    rec = parse_line(" 10%|█         | 10/100 [00:20<03:00,  2.00s/it]")
    assert rec.kind == "progress" and rec.values["steps_per_s"] == 0.5 and rec.total == 100


def test_our_human_line_round_trips_through_format_step_line() -> None:
    line = format_step_line(120, {"loss": 2.31, "lr": 3e-4, "tokens_per_s": 51234, "time": 5.0}, total=1000)
    assert line == "step 120/1000 | loss 2.3100 | lr 3.000e-04 | tokens_per_s 51234"
    rec = parse_line("[rank0]: " + line)
    assert (rec.kind, rec.fmt, rec.rank, rec.step, rec.total) == ("metrics", "gputrain", 0, 120, 1000)
    assert rec.values == {"loss": 2.31, "lr": 3e-4, "tokens_per_s": 51234.0}


def test_metrics_jsonl_line_and_generic_kv_line() -> None:
    rec = parse_line('{"step": 7, "time": 1700000000.5, "loss": 0.25, "kl": 0.01}')
    assert (rec.fmt, rec.step, rec.time, rec.values) == ("jsonl", 7, 1700000000.5, {"loss": 0.25, "kl": 0.01})
    rec = parse_line("iter 100: loss 2.3123, time 123.45ms, mfu 30.00%")
    assert (rec.fmt, rec.step) == ("kv", 100)
    assert rec.values == {"loss": 2.3123, "step_time_ms": 123.45, "mfu": 30.0}


@pytest.mark.parametrize(
    "line",
    ["loading 5 shards", "", "\x00\x01\ufffd\ufffd garbage", "{'loss': oops", '{"step": [1, 2]}', "step:"],
)
def test_unknown_or_broken_lines_stay_text(line: str) -> None:
    rec = parse_line(line)
    assert rec.kind == "text" and rec.values == {}


def test_huge_line_is_cut_not_copied_whole() -> None:
    rec = parse_line("x" * (5 << 20))
    assert rec.kind == "text" and len(rec.text) <= 64 * 1024 + 1


def test_interleaved_rank_traceback_is_assembled_per_rank() -> None:
    recs = records("oom_torchrun.log")
    tracebacks = [r for r in recs if r.kind == "traceback"]
    assert len(tracebacks) == 1
    tb = tracebacks[0]
    assert tb.rank == 1 and tb.event == "cuda_oom"
    assert tb.text.splitlines()[0] == "Traceback (most recent call last):"
    assert tb.text.splitlines()[-1].startswith("torch.OutOfMemoryError: CUDA out of memory")
    # rank 0's metric line in the middle of rank 1's traceback is still a metric.
    assert [r.step for r in recs if r.kind == "metrics" and r.rank == 0] == [10, 11]


def test_traceback_cut_off_at_end_of_log_is_flushed() -> None:
    parser = LogParser()
    assert parser.feed("Traceback (most recent call last):") == []
    assert parser.feed('  File "x.py", line 1') == []
    flushed = parser.flush()
    assert len(flushed) == 1 and flushed[0].kind == "traceback" and "x.py" in flushed[0].text


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"),
        ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled", "nccl"),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", "nccl"),
        ("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 10:00 DUE TO TIME LIMIT ***", "time_limit"),
        ("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 10:00 DUE TO PREEMPTION ***", "preempted"),
        ("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-11-21T10:00:00 ***", "cancelled"),
        ("slurmstepd: error: Detected 1 oom_kill event in StepId=12.0", "host_oom"),
        ("Killed", "signal"),
        ("torch.distributed.elastic.multiprocessing.api: died with <Signals.SIGKILL: 9>", "signal"),
        ("INFO step 10 ok", None),
    ],
)
def test_classify_line(line: str, cause: str | None) -> None:
    assert classify_line(line) == cause


def test_classify_failure_picks_root_cause_and_state() -> None:
    events = {"cuda_oom": "oom", "nccl": "nccl", "exception": "tb"}
    assert classify_failure(1, events) == ("FAILED", "cuda_oom")
    assert classify_failure(0, events) == ("COMPLETED", None)
    assert classify_failure(75, {}) == ("PREEMPTED", "preempted")
    assert classify_failure(1, {}, markers={"PREEMPTED"}) == ("PREEMPTED", "preempted")
    assert classify_failure(75, {}, markers={"PREEMPTED", "CANCELLED"}) == ("CANCELLED", "cancelled")
    assert classify_failure(143, {"time_limit": "x", "signal": "y"}) == ("TIMEOUT", "time_limit")
    assert classify_failure(137, {}) == ("FAILED", "signal")
    assert classify_failure(2, {}) == ("FAILED", "exit_code")
    assert signal_name(137) == "SIGKILL" and signal_name(-15) == "SIGTERM" and signal_name(1) is None
