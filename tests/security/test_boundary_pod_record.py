"""Red-team round 5 — the local record of a pod run comes only from what the local process wrote.

The attack, on the tree before this round (real sshd and rsync/scp on the loopback, as the salvage tests):
salvage downloaded every plainly named file of the pod's job folder into the local job folder, and the
end-of-run download took the whole folder; ``runpod.json``, ``plan.json`` and ``run_multigpu.sh`` were not
excluded (only ``training_output.log`` was). The pod plants a ``runpod.json`` that says COMPLETED, exit 0,
another pod's id and a cost of $0; ``gputrain runpod up`` is SIGKILLed after the salvage, before it writes
its own record; ``runpod list``/``status`` then ``reconcile()`` the run from the job folder and record the
pod's word in the registry: a crashed, billed run shows as a free success (and the planted launcher and plan
would be uploaded to the next pod of a ``--retry``). Now the names the local side writes are never taken
from the pod (rsync excludes them, and the folder's names are listed and filtered before any copy, for scp
too), and ``reconcile`` takes only the fields and types its own writer writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputrain.backends.runpod.manage import reconcile
from gputrain.backends.runpod.salvage import salvage
from gputrain.backends.runpod.ssh import PodShell
from gputrain.registry.store import JobRecord, JobRegistry
from gputrain.registry.transitions import record_job
from tests.support.pod_shell import loopback_pod_shell

pytestmark = [pytest.mark.integration]
NAME = "gputrain-record-test-0123456789"
PLANTED = {"state": "COMPLETED", "exit_code": 0, "pod_id": "someone-elses-pod", "cost_usd": 0.0,
           "reason": "finished", "cost_per_hour_usd": 0.0, "uptime_s": 1.0, "planted_key": "\x1b]0;x\x07"}


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PodShell]:
    with loopback_pod_shell(tmp_path, monkeypatch, NAME) as shell:
        yield shell


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    remote = tmp_path / "pod" / "job"
    remote.mkdir(parents=True)
    (remote / "metrics.jsonl").write_text('{"step": 1, "time": 0, "loss": 2.0}\n')
    (remote / "runpod.json").write_text(json.dumps(PLANTED))
    (remote / "plan.json").write_text('{"planted": true}')
    (remote / "run_multigpu.sh").write_text("planted\n")
    local = tmp_path / "local-job"
    local.mkdir()
    (local / "plan.json").write_text('{"local": true}')
    (local / "run_multigpu.sh").write_text("local\n")
    return remote, local


@pytest.mark.slow
@pytest.mark.parametrize("use_rsync", [True, False], ids=["rsync", "scp"])
def test_a_planted_runpod_json_never_becomes_the_local_record(shell: PodShell, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              use_rsync: bool) -> None:
    if not use_rsync:
        monkeypatch.setattr(PodShell, "_rsync_ok", lambda self: False)
    remote, local = _folders(tmp_path)
    registry = JobRegistry()
    record_job(registry, JobRecord(job_id=NAME, backend="runpod", name=NAME, job_dir=str(local),
                                   state="RUNNING", extra={"pod_id": "pod-ours", "cost_per_hour_usd": 2.5}))
    got = salvage(shell, str(remote), local, 120, lambda _: None)  # ... and `up` is SIGKILLed here
    assert "metrics.jsonl" in got and (local / "metrics.jsonl").exists()  # results still come back
    shell.download(str(remote), local)  # the end-of-run copy of the whole folder
    assert not (local / "runpod.json").exists()
    assert (local / "plan.json").read_text() == '{"local": true}'
    assert (local / "run_multigpu.sh").read_text() == "local\n"
    found = registry.find(NAME)
    assert found is not None
    after = reconcile(found, pod_gone=True)
    assert after.state == "LOST" and after.exit_code is None
    assert after.extra.get("pod_id") == "pod-ours" and "planted_key" not in after.extra


def test_reconcile_takes_only_the_fields_its_writer_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever else put a ``runpod.json`` in the folder, only the writer's fields of the writer's types reach
    the registry."""
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    local = tmp_path / "job"
    local.mkdir()
    (local / "runpod.json").write_text(json.dumps({**PLANTED, "state": "FAILED", "exit_code": 3,
                                                   "cost_usd": "free", "pod_id": ["x"]}))
    registry = JobRegistry()
    record_job(registry, JobRecord(job_id=NAME, backend="runpod", name=NAME, job_dir=str(local),
                                   state="RUNNING", extra={"pod_id": "pod-ours"}))
    found = registry.find(NAME)
    assert found is not None
    after = reconcile(found, pod_gone=True)
    assert after.state == "FAILED" and after.exit_code == 3
    assert after.extra["pod_id"] == "pod-ours" and "planted_key" not in after.extra
    assert "cost_usd" not in after.extra or isinstance(after.extra["cost_usd"], float)
