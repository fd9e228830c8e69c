"""Job registry: round trip, lookups, updates, and concurrent writers from separate processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gputrain.errors import RegistryError
from gputrain.registry.store import INVALID_EXTRA_KEY, JobRecord, JobRegistry
from tests.support.cli import gputrain as run_gputrain


def _rec(job_id: str, **kw: object) -> JobRecord:
    return JobRecord(job_id=job_id, backend="slurm", name=f"selftest_job_{job_id}", **kw)  # type: ignore[arg-type]


def test_add_get_update_roundtrip(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    job_dir = tmp_path / "logs" / "selftest_job_41_x"
    added = reg.add(_rec("41", cluster="testbed", job_dir=str(job_dir), gpus_per_node=2, extra={"a": 1}))
    assert added.id is not None and added.created_at
    assert reg.get("41").cluster == "testbed"
    assert reg.get("selftest_job_41").job_id == "41"
    assert reg.get(str(job_dir)).job_id == "41"
    updated = reg.update("41", state="FAILED", exit_code=3, extra={"reason": "NonZeroExitCode"})
    assert (updated.state, updated.exit_code) == ("FAILED", 3)
    again = reg.get("41")
    assert again.extra == {"a": 1, "reason": "NonZeroExitCode"} and again.exit_code == 3


def test_job_dir_under_a_symlinked_logs_dir_is_found(tmp_path: Path) -> None:
    (tmp_path / "real" / "logs" / "selftest_job_7_x").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    reg = JobRegistry(tmp_path / "jobs.db")
    job_dir = tmp_path / "link" / "logs" / "selftest_job_7_x"  # `--logs-dir <link>/logs`, stored unresolved
    reg.add(_rec("7", job_dir=str(job_dir)))
    assert reg.get(f"{job_dir}/").job_id == "7"  # trailing slash, as shell completion types it


def test_empty_job_id_gets_backend_prefix(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    first = reg.add(JobRecord(job_id="", backend="local", name="a"))
    second = reg.add(JobRecord(job_id="", backend="local", name="b"))
    assert first.job_id == f"local-{first.id}" and second.job_id == f"local-{second.id}"
    assert reg.get(second.job_id).name == "b"


def test_list_is_newest_first_and_limited(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    for i in range(5):
        reg.add(_rec(str(i)))
    assert [r.job_id for r in reg.list(3)] == ["4", "3", "2"]


def test_bad_input_raises_registry_error(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    reg.add(_rec("1"))
    with pytest.raises(RegistryError, match="no job '9'"):
        reg.get("9")
    with pytest.raises(RegistryError, match="state"):
        reg.update("1", state="DONE")
    with pytest.raises(RegistryError, match="bogus"):
        reg.update("1", bogus=1)
    assert reg.get("1").state == "PENDING"


def test_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    with pytest.raises(RuntimeError), reg._connect(write=True) as conn:
        conn.execute("INSERT INTO jobs (job_id, backend, state, created_at, updated_at) "
                     "VALUES ('x', 'slurm', 'PENDING', 'now', 'now')")
        raise RuntimeError("boom")
    assert reg.list() == []


def test_garbage_file_is_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    db.write_bytes(b"not a database" * 100)
    with pytest.raises(RegistryError) as info:
        JobRegistry(db).list()
    assert "\n" not in str(info.value)


def _writer(path: str, worker: int, count: int) -> None:
    reg = JobRegistry(path)
    for i in range(count):
        rec = reg.add(_rec(f"{worker}-{i}", extra={"worker": worker, "i": i}))
        reg.update(rec.job_id, state="RUNNING")


def test_parallel_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    workers, count = 6, 25
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, count)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * workers
    jobs = JobRegistry(path).list(limit=None)
    assert len(jobs) == workers * count
    assert {j.job_id for j in jobs} == {f"{w}-{i}" for w in range(workers) for i in range(count)}
    assert all(j.state == "RUNNING" and j.extra["worker"] == int(j.job_id.split("-")[0]) for j in jobs)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def _first_open(path: str, start: Any, errors: Any) -> None:
    start.wait()
    try:
        JobRegistry(path).add(_rec(str(os.getpid())))
    except RegistryError as exc:
        errors.put(str(exc))


@pytest.mark.slow  # 30 rounds of 12 processes: ~10 s
def test_processes_opening_a_new_registry_together_all_write(tmp_path: Path) -> None:
    """Twelve processes open the same new registry at one instant (a barrier), thirty times. SQLite refuses a
    racing switch to WAL with "database is locked" at once, busy timeout or not: before the switch was
    retried, some rounds lost a process this way (4-7 of 40 here)."""
    ctx = mp.get_context("fork")
    errors, counts = ctx.Queue(), []
    for round_ in range(30):
        path, start = str(tmp_path / f"r{round_}" / "jobs.db"), ctx.Barrier(12)
        procs = [ctx.Process(target=_first_open, args=(path, start, errors)) for _ in range(12)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 12
        counts.append(len(JobRegistry(path).list(limit=None)))
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == [] and counts == [12] * 30


def test_rollback_error_does_not_mask_the_failed_statement(tmp_path: Path) -> None:
    """``OR ROLLBACK`` ends the transaction itself; the report must be the conflict, not "no transaction"."""
    reg = JobRegistry(tmp_path / "jobs.db")
    first = reg.add(_rec("1"))
    with pytest.raises(RegistryError, match="UNIQUE constraint failed") as info, reg._connect(write=True) as conn:
        conn.execute("INSERT OR ROLLBACK INTO jobs (id, job_id, backend, state, created_at, updated_at) "
                     "VALUES (?, 'dup', 'slurm', 'PENDING', 'now', 'now')", (first.id,))
    assert "cannot rollback" not in str(info.value)
    assert [r.job_id for r in reg.list()] == ["1"]


def test_error_raised_after_the_transaction_ended_is_the_one_reported(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    with pytest.raises(RuntimeError, match="boom"), reg._connect(write=True) as conn:
        conn.execute("ROLLBACK")
        raise RuntimeError("boom")


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "c.yaml")}
    return run_gputrain(*args, cwd=tmp_path, env=env, timeout=60)


def test_corrupt_extra_row_still_lists_with_one_warning(tmp_path: Path) -> None:
    db = tmp_path / "home" / "jobs.db"
    reg = JobRegistry(db)
    reg.add(JobRecord(job_id="", backend="local", name="good", extra={"pid": 1}))
    bad = reg.add(JobRecord(job_id="", backend="local", name="bad"))
    with sqlite3.connect(db) as conn:  # what a hand edit or a truncated write from an old version leaves
        conn.execute("UPDATE jobs SET extra = ? WHERE id = ?", ('{"pid": 12', bad.id))

    listing = _cli(tmp_path, "jobs", "--no-refresh")
    assert listing.returncode == 0, listing.stderr
    assert "local-1" in listing.stdout and "local-2" in listing.stdout
    assert "Traceback" not in listing.stderr
    warnings = [line for line in listing.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and str(db) in warnings[0] and "job local-2" in warnings[0]

    as_json = _cli(tmp_path, "jobs", "--no-refresh", "--json")
    assert as_json.returncode == 0, as_json.stderr
    extras = {r["job_id"]: r["extra"] for r in json.loads(as_json.stdout)}
    assert extras == {"local-1": {"pid": 1}, "local-2": {INVALID_EXTRA_KEY: '{"pid": 12'}}

    status = _cli(tmp_path, "status", "local-2")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert "PENDING" in status.stdout

    # An update keeps the damaged text and writes the column back as valid JSON.
    assert reg.update("local-2", extra={"pid": 7}).extra == {INVALID_EXTRA_KEY: '{"pid": 12', "pid": 7}
    with sqlite3.connect(db) as conn:
        assert json.loads(conn.execute("SELECT extra FROM jobs WHERE id = ?", (bad.id,)).fetchone()[0])["pid"] == 7


def test_extra_that_is_json_but_not_an_object_is_marked(tmp_path: Path) -> None:
    reg = JobRegistry(tmp_path / "jobs.db")
    rec = reg.add(_rec("5"))
    with sqlite3.connect(tmp_path / "jobs.db") as conn:
        conn.execute("UPDATE jobs SET extra = '[1, 2]' WHERE id = ?", (rec.id,))
    assert reg.get("5").extra == {INVALID_EXTRA_KEY: "[1, 2]"}
