"""The job-state contract: one function from (exit code, markers, backend facts) to the end state."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.contract import jobstate
from gputrain.contract.jobstate import BackendFacts, end_state, markers_in
from gputrain.logs.classify import classify_failure

P, C = jobstate.PREEMPTED_MARKER, jobstate.CANCELLED_MARKER


@pytest.mark.parametrize(("code", "markers", "facts", "state"), [
    (0, {P, C}, BackendFacts(user_cancelled=True), "COMPLETED"),  # a resumed run that finished
    (75, {P}, BackendFacts(user_cancelled=True), "CANCELLED"),  # the runtime checkpoints on any SIGTERM
    (75, {P, C}, BackendFacts(), "CANCELLED"),  # the marker `gputrain cancel` writes before signalling
    (143, set(), BackendFacts(scheduler_state="CANCELLED"), "CANCELLED"),
    (75, {P}, BackendFacts(), "PREEMPTED"),
    (1, {P}, BackendFacts(), "PREEMPTED"),
    (75, set(), BackendFacts(), "PREEMPTED"),
    (1, set(), BackendFacts(scheduler_state="PREEMPTED"), "PREEMPTED"),
    (143, set(), BackendFacts(log_causes=frozenset({"time_limit"})), "TIMEOUT"),
    (None, set(), BackendFacts(scheduler_state="TIMEOUT"), "TIMEOUT"),
    (None, set(), BackendFacts(connection_lost=True), "LOST"),
    (None, set(), BackendFacts(scheduler_state="NODE_FAIL"), "NODE_FAIL"),  # was UNKNOWN: not a state (#30)
    (137, set(), BackendFacts(scheduler_state="NODE_FAIL"), "NODE_FAIL"),  # the kill came with the node
    (1, set(), BackendFacts(connection_lost=True), "FAILED"),  # the training's own code came back
    (1, set(), BackendFacts(), "FAILED"),
    (None, set(), BackendFacts(), "UNKNOWN"),
])
def test_end_state_table(code: int | None, markers: set[str], facts: BackendFacts, state: str) -> None:
    ending = end_state(code, markers, facts)
    assert ending.state == state and ending.reason
    assert ending.state in jobstate.STATES


def test_markers_are_read_from_the_job_folder(tmp_path: Path) -> None:
    assert markers_in(tmp_path) == frozenset() and markers_in(None) == frozenset()
    (tmp_path / P).write_text("{}")
    assert markers_in(tmp_path) == {P}
    jobstate.write_cancel_marker(tmp_path, "test")
    assert markers_in(tmp_path) == {P, C}
    assert end_state(75, markers_in(tmp_path)).state == "CANCELLED"
    jobstate.write_cancel_marker(tmp_path / "gone" / "deeper", "test")  # no folder: not an error


def test_summaries_use_the_same_rule() -> None:
    """The log classifier returns the contract's state for every case above, adding only the log's cause."""
    assert classify_failure(75, {}, {P}, BackendFacts(user_cancelled=True)) == ("CANCELLED", "cancelled")
    assert classify_failure(75, {}, {P, C}) == ("CANCELLED", "cancelled")
    assert classify_failure(1, {"cuda_oom": "x"}) == ("FAILED", "cuda_oom")
    assert classify_failure(None, {}, (), BackendFacts(connection_lost=True)) == ("LOST", "lost")


def test_final_and_ended_states() -> None:
    assert jobstate.FINAL_STATES < jobstate.ENDED_STATES
    assert "PREEMPTED" in jobstate.ENDED_STATES and "PREEMPTED" not in jobstate.FINAL_STATES  # may be requeued
    assert not jobstate.LIVE_STATES & jobstate.ENDED_STATES
    assert "NODE_FAIL" in jobstate.ENDED_STATES and "NODE_FAIL" not in jobstate.FINAL_STATES  # Slurm may requeue it


@pytest.mark.parametrize("line", [
    "slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT 2026-11-27T07:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD "
    "LOG FOR DETAILS ***",  # Slurm's own wording (the reason goes on after a comma)
    "srun: error: Node failure on gpu-07",
])
def test_a_node_failure_in_a_log_is_the_node_fail_state_and_names_the_node(tmp_path: Path, line: str) -> None:
    """A bare log's NODE_FAIL was outside the contract's states (the registry refused it) and Slurm's full
    wording read as a user's cancel (#30 item 17)."""
    from gputrain.logs.summarize import summarize

    log = tmp_path / "train.log"
    log.write_text("step 10 | loss 1.2\n" + line + "\n")
    summary = summarize(log, write=False)
    assert summary["state"] == "NODE_FAIL" and summary["state"] in jobstate.STATES
    assert summary["root_cause"]["kind"] == "node_fail" and "gpu-07" in summary["failure"]
