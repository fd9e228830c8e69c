"""Hostile input never crashes the scanner: garbage, empty files, giant lines, lines cut mid-write."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.errors import LogError
from gputrain.logs import scan as scan_mod
from gputrain.logs.scan import MAX_CARRY, LogScanner
from gputrain.logs.summarize import summarize


def test_binary_garbage_and_empty_files(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(bytes(range(256)) * 4000 + b"\nloss\xff\xfe 1.5 \x00\n")
    s = summarize(garbage, write=False)
    assert s["state"] == "UNKNOWN" and s["cause"] is None
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    s = summarize(empty, write=False)
    assert s["steps"]["done"] is None and s["metrics"] == {}


def test_odd_numbers_in_metric_lines_do_not_crash(tmp_path: Path) -> None:
    from gputrain.logs.parse import parse_line

    assert parse_line("iter 1e5: loss 2.0").values["loss"] == 2.0  # "1e5" is no step number
    assert parse_line('{"step": Infinity, "time": 1, "loss": 1}').kind == "metrics"
    log = tmp_path / "odd.log"
    log.write_text('iter 1e5: loss 2.0\n{"step": Infinity, "time": 1, "loss": 1}\niter 7: loss 1.5\n')
    s = summarize(log, write=False)
    assert s["metrics"]["loss"]["last"] == 1.5


def test_job_folder_without_logs_or_metrics(tmp_path: Path) -> None:
    s = summarize(tmp_path)
    assert s["steps"]["done"] is None
    assert (tmp_path / "job_summary.txt").exists()


def test_giant_line_is_skipped_in_bounded_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 1 << 20)  # many chunks inside the one long line
    log = tmp_path / "giant.log"
    with log.open("wb") as fh:
        fh.write(b"step 1/10 | loss 3.0\n")
        fh.write(b"loss " * (3 << 20))  # 15 MiB without a newline
        fh.write(b"\nstep 2/10 | loss 2.0\n")
    scanner = LogScanner(log)
    carries: list[int] = []
    original = LogScanner._feed

    def watch(self: LogScanner, buf: bytearray, end: int, start: int = 0) -> None:
        original(self, buf, end, start)
        carries.append(len(self.carry))

    monkeypatch.setattr(LogScanner, "_feed", watch)
    scanner.scan()
    assert max(carries) <= MAX_CARRY
    assert scanner.table.max_step == 2
    assert scanner.table.metrics["loss"].last == (2.0, 2.0)


def test_sparse_file_of_zeros_without_newline(tmp_path: Path) -> None:
    log = tmp_path / "zeros.log"
    with log.open("wb") as fh:
        fh.truncate(64 << 20)
    scanner = LogScanner(log)
    assert scanner.scan() == 64 << 20
    assert scanner.table.records == 0 and len(scanner.carry) <= MAX_CARRY


def test_partial_last_line_is_read_once_complete(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"step 1/5 | loss 1.0\nstep 2/5 | lo")
    scanner = LogScanner(log)
    scanner.scan()
    assert scanner.table.max_step == 1
    with log.open("ab") as fh:
        fh.write(b"ss 0.5\n")
    scanner = LogScanner.from_json(scanner.to_json())  # also across a save/load of the state
    scanner.scan()
    assert scanner.table.max_step == 2 and scanner.table.metrics["loss"].last == (2.0, 0.5)


def test_missing_log_file_is_a_log_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no such log file"):
        LogScanner(tmp_path / "gone.log").scan()


def test_unreadable_state_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "training_output.log").write_text("step 4/8 | loss 1.0\n")
    (tmp_path / ".summary_state.json").write_text("{not json")
    assert summarize(tmp_path)["steps"]["done"] == 4


def test_worker_traceback_wins_over_torchrun_echo_and_later_consequences() -> None:
    from gputrain.logs.causes import root_cause

    worker = {"rank": 1, "text": 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom'}
    echo = {"rank": 0, "text": "Traceback (most recent call last):\nRuntimeError: [gloo/pair.cc:553] Connection "
                               "closed by peer [127.0.0.1]:34986"}
    launcher = {"rank": None, "text": "Traceback (most recent call last):\n  File \"run.py\"\n"
                                      "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: x.py FAILED"}
    for order in ([worker, echo, launcher], [echo, worker, launcher], [launcher, worker]):
        cause = root_cause(events={}, tracebacks=order, tail="", exit_code=1)
        assert cause is not None and (cause["exception"], cause["rank"]) == ("RuntimeError", 1)
    only_launcher = root_cause(events={}, tracebacks=[launcher], tail="", exit_code=1)
    assert only_launcher is not None and only_launcher["kind"] == "exit_code"


def test_resumed_run_replaying_steps_keeps_one_monotonic_curve() -> None:
    from gputrain.logs.stats import MetricStats

    stats = MetricStats()
    for step in range(1, 11):
        stats.add(step, 10.0 - step)
    for step in range(6, 13):  # resumed from the step-5 checkpoint
        stats.add(step, 100.0 + step)
    steps = [s for s, _ in stats.series]
    assert steps == sorted(set(steps)) and steps[-1] == 12
    assert dict(stats.series)[6] == 106.0 and stats.last == (12, 112.0)


def test_mapped_and_read_scans_agree_and_resume_a_carried_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Large new stretches are searched in place (mmap), small ones read: same state either way, and the
    partial last line a mapped scan carries is completed by the next scan (#30)."""
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 128 << 10)
    body = "".join(f"step {i}/12000 | loss {5 - i / 3000:.4f}\n" if i % 7 else f"NCCL INFO chatter {i}\n"
                   for i in range(1, 12001))
    mapped: list[int] = []
    original = LogScanner._scan_mapped

    def spy(self: LogScanner, fd: int, size: int) -> int | None:
        mapped.append(size)
        return original(self, fd, size)

    monkeypatch.setattr(LogScanner, "_scan_mapped", spy)
    states = []
    for name, map_min in (("mapped", 256 << 10), ("read", 1 << 40)):
        monkeypatch.setattr(scan_mod, "MAP_MIN_BYTES", map_min)
        log = tmp_path / f"{name}.log"
        log.write_text(body + "step 12001/12002 | lo")  # cut mid-line
        scanner = LogScanner(log)
        assert scanner.scan() == log.stat().st_size
        with log.open("a") as fh:
            fh.write("ss 1.5\nstep 12002/12002 | loss 1.25\n")
        scanner = LogScanner.from_json(scanner.to_json())
        scanner.scan()
        state = scanner.to_json()
        state.pop("path"), state.pop("inode")
        states.append(state)
    assert len(mapped) == 1  # the first scan of the first file only: the others read their bytes
    assert states[0] == states[1]
    assert list(states[0]["table"]["metrics"]["loss"]["last"]) == [12002, 1.25]
    assert states[0]["table"]["records"] == 12000 - 12000 // 7 + 2
