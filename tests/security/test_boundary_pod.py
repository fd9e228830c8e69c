"""#25.12 — salvage copies regular files only and never reads through a link the pod planted.

The attack: the pod (this machine's loopback sshd, real ssh and rsync) plants ``container.log`` in its job
folder as a link to a file of the launching machine (``/proc/self/environ`` holds the RunPod API key; here a
secret file outside the pod's folder), and its newest checkpoint as a link to a folder outside. ``rsync -a``
recreated the links in the local job folder; keeping the container log then read through the link and wrote
the secret into the job folder, mode 0644. Now no link, device or FIFO comes back, the container log is
written from the API's lines only, mode 0600, and the ordinary results are still salvaged.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputrain.backends.runpod.api import RunPodClient
from gputrain.backends.runpod.salvage import keep_container_log, salvage
from gputrain.backends.runpod.ssh import PodShell

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod

from tests.support.pod_shell import loopback_pod_shell

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CANARY = "rpa_CANARY_salvage_7d1e0b3c5a"


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PodShell]:
    with loopback_pod_shell(tmp_path, monkeypatch, "gputrain-salvage-test") as shell:
        yield shell


def _hostile_pod_folder(tmp_path: Path) -> Path:
    outside = tmp_path / "launcher-secrets"
    outside.mkdir()
    (outside / "environ").write_text(f"RUNPOD_API_KEY={CANARY}\n")
    (outside / "state.pt").write_text(CANARY)
    job = tmp_path / "pod" / "job"
    (job / "checkpoints" / "step_00000002").mkdir(parents=True)
    (job / "checkpoints" / "step_00000002" / "state.pt").write_text("weights")
    (job / "checkpoints" / "step_00000002" / "leak.pt").symlink_to(outside / "state.pt")
    (job / "checkpoints" / "step_00000009").symlink_to(outside)  # the "newest" checkpoint: a link out
    (job / "metrics.jsonl").write_text('{"step": 1, "time": 0, "loss": 2.0}\n')
    (job / "container.log").symlink_to(outside / "environ")
    (job / "result.json").symlink_to("/proc/self/environ")
    os.mkfifo(job / "fifo.log")
    return job


def _no_links_or_canary(local: Path) -> None:
    for path in local.rglob("*"):
        mode = path.lstat().st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), f"salvage brought back a non-regular {path}"
        if stat.S_ISREG(mode):
            assert CANARY not in path.read_text(errors="replace"), f"a secret was read into {path}"


def test_salvage_brings_back_regular_files_only(tmp_path: Path, shell: PodShell) -> None:
    remote = _hostile_pod_folder(tmp_path)
    local = tmp_path / "local-job"
    local.mkdir()
    said: list[str] = []
    got = salvage(shell, str(remote), local, 120, said.append)
    assert (local / "metrics.jsonl").read_text().startswith('{"step": 1')  # results still come back
    _no_links_or_canary(local)
    assert "container.log" not in got and "result.json" not in got
    # the newest *real* files of the pod are what was listed; a link named like a checkpoint is not followed
    assert not (local / "checkpoints" / "step_00000009").exists()

    fake = FakeRunPod(api_key=CANARY).start()
    try:
        client = RunPodClient(CANARY, fake.base_url)
        _, pod = fake._create({"name": "p", "image": "me/img:1", "gpu": {"id": "NVIDIA B200", "count": 1}})
        (local / "container.log").symlink_to(tmp_path / "launcher-secrets" / "environ")  # planted by any way
        assert keep_container_log(client, pod["id"], local, idle_s=0.5) > 0
    finally:
        fake.stop()
    log = local / "container.log"
    assert not log.is_symlink() and "container started" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert (tmp_path / "launcher-secrets" / "environ").read_text() == f"RUNPOD_API_KEY={CANARY}\n"  # untouched
    _no_links_or_canary(local)

    # the same pod without the linked "newest" checkpoint: the real one comes back, its planted link does not
    (remote / "checkpoints" / "step_00000009").unlink()
    again = tmp_path / "local-job-2"
    again.mkdir()
    got = salvage(shell, str(remote), again, 120, lambda _: None)
    assert "checkpoints/step_00000002" in got
    assert (again / "checkpoints" / "step_00000002" / "state.pt").read_text() == "weights"
    assert not (again / "checkpoints" / "step_00000002" / "leak.pt").exists()
    _no_links_or_canary(again)
