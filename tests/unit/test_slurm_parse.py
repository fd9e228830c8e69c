"""Slurm output parsers, fed with outputs recorded on the testbed (tests/unit/data/slurm/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.backends.slurm_parse import (
    explain_sbatch_error,
    gres_offered,
    map_state,
    parse_exit_code,
    parse_sacct,
    parse_sbatch_id,
    parse_scontrol_job,
    parse_squeue,
)
from gputrain.errors import ClusterError

DATA = Path(__file__).parent / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_scontrol_failed_job_has_exit_code_and_reason() -> None:
    job = parse_scontrol_job(read("scontrol_failed.txt"))
    assert job is not None
    assert (job.job_id, job.state, job.exit_code, job.reason, job.nodes) == ("3", "FAILED", 3, "NonZeroExitCode", "n1")


def test_scontrol_cancelled_job_reports_signal_not_exit_code() -> None:
    job = parse_scontrol_job(read("scontrol_cancelled.txt"))
    assert job is not None
    assert (job.state, job.exit_code, job.signal, job.nodes, job.num_nodes) == ("CANCELLED", None, 15, "n[1-2]", 2)


def test_scontrol_requeued_and_held() -> None:
    requeued = parse_scontrol_job(read("scontrol_requeued.txt"))
    held = parse_scontrol_job(read("scontrol_held.txt"))
    assert requeued is not None and held is not None
    assert (requeued.state, requeued.restarts, requeued.reason) == ("REQUEUED", 1, "BeginTime")
    assert (held.state, held.reason, held.gres, held.exit_code) == ("PENDING", "JobHeldUser", "gres:gpu:volta:2", None)
    assert parse_scontrol_job(read("scontrol_unknown.txt")) is None


def test_squeue_all_states() -> None:
    jobs = parse_squeue(read("squeue_all.txt"))
    assert {k: v.state for k, v in jobs.items()} == {
        "5": "CANCELLED", "3": "FAILED", "6": "PENDING", "4": "PENDING", "7": "RUNNING",
    }
    assert jobs["5"].nodes == "n[1-2]" and jobs["5"].num_nodes == 2


def test_sacct_lines() -> None:
    text = read("sacct_sample.txt")
    cancelled, failed = parse_sacct(text, "4242"), parse_sacct(text, "4243")
    assert cancelled is not None and failed is not None
    assert (cancelled.state, cancelled.signal, cancelled.nodes) == ("CANCELLED", 15, "n[1-2]")
    assert (failed.state, failed.exit_code) == ("FAILED", 3)
    assert parse_sacct(text, "1") is None


@pytest.mark.parametrize(("raw", "expected"), [
    ("COMPLETING", "RUNNING"), ("NODE_FAIL", "FAILED"), ("OUT_OF_MEMORY", "FAILED"), ("DEADLINE", "TIMEOUT"),
    ("PREEMPTED", "PREEMPTED"), ("REQUEUE_HOLD", "REQUEUED"), ("CANCELLED by 1000", "CANCELLED"),
    ("BOGUS", "UNKNOWN"), ("", "UNKNOWN"),
])
def test_state_vocabulary(raw: str, expected: str) -> None:
    assert map_state(raw) == expected


def test_exit_codes_and_job_ids() -> None:
    assert parse_exit_code("3:0") == (3, None)
    assert parse_exit_code("0:9") == (None, 9)
    assert parse_exit_code("junk") == (None, None)
    assert parse_sbatch_id("4242\n") == "4242"
    assert parse_sbatch_id("4242;cluster\n") == "4242"
    with pytest.raises(ClusterError):
        parse_sbatch_id("sbatch: error\n")


def test_gres_offered_reads_sinfo() -> None:
    text = read("sinfo_gres.txt")
    assert gres_offered(text, "volta", 2)
    assert not gres_offered(text, "volta", 4)
    assert not gres_offered(text, "tesla", 1)
    assert gres_offered(text, None, 1)
    assert not gres_offered("(null)\n", None, 1)


def test_sbatch_errors_become_one_actionable_line() -> None:
    kw = {"partition": "nope", "gres": "gpu:volta:2", "cluster": "lab"}
    part = explain_sbatch_error(read("sbatch_bad_partition.txt"), **kw)  # type: ignore[arg-type]
    assert "partition 'nope'" in part and "sinfo" in part
    down = explain_sbatch_error(read("sbatch_unreachable.txt"), **kw)  # type: ignore[arg-type]
    assert "controller unreachable" in down and "scontrol ping" in down
    gres = explain_sbatch_error(read("sbatch_bad_gres.txt"), gres_ok=False, **kw)  # type: ignore[arg-type]
    assert "no node offers gpu:volta:2" in gres
    cpus = explain_sbatch_error(read("sbatch_bad_gres.txt"), gres_ok=True, **kw)  # type: ignore[arg-type]
    assert "CPUs/memory/nodes" in cpus
    for msg in (part, down, gres, cpus):
        assert "\n" not in msg
