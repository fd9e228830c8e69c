"""SSH plumbing against a real loopback sshd: readiness, copies by rsync and by scp, streamed runs with
secrets passed on stdin (never in argv)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

from gputrain.backends.runpod.pods import SshEndpoint
from gputrain.backends.runpod.ssh import PodShell, ensure_key, forget_key, state_dir
from gputrain.errors import RunPodError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import LoopbackSshd

pytestmark = pytest.mark.integration


@pytest.fixture
def shell(tmp_path, monkeypatch):
    if LoopbackSshd.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("sshd missing: apt-get install -y openssh-server rsync")
        pytest.skip("sshd missing")
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    sshd = LoopbackSshd(tmp_path / "sshd").start()
    key, public = ensure_key("gputrain-ssh-test")
    sshd.authorize(public)
    yield PodShell(SshEndpoint("127.0.0.1", sshd.port, sshd.user), key)
    sshd.stop()


def test_key_is_made_once_and_forgotten(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path))
    key, public = ensure_key("gputrain-k")
    assert public.startswith("ssh-ed25519 ") and oct(key.stat().st_mode & 0o777) == "0o600"
    assert ensure_key("gputrain-k") == (key, public)
    forget_key("gputrain-k")
    assert not state_dir("gputrain-k").exists()


@pytest.mark.parametrize("use_rsync", [True, False], ids=["rsync", "scp"])
def test_upload_run_download_round_trip(shell, tmp_path, monkeypatch, use_rsync):
    if not use_rsync:
        monkeypatch.setattr(PodShell, "_rsync_ok", lambda self: False)
    shell.wait_until_ready(time.monotonic() + 20)
    src = tmp_path / "data"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha\n")
    remote = tmp_path / "remote"
    shell.upload([src], str(remote))
    assert (remote / "data" / "sub" / "a.txt").read_text() == "alpha\n"

    lines: list[str] = []
    command = (f"cd {remote} && set -a && eval \"$(cat)\" && set +a && mkdir -p job && "
               "printf '%s\\n' \"$TOKEN\" | sha256sum > job/token.sha && echo out-line && echo err-line >&2 && exit 3")
    rc = shell.stream(command, "TOKEN='s3cr3t value'\n", lines.append)
    assert rc == 3 and "out-line" in lines and "err-line" in lines

    back = tmp_path / "back"
    shell.download(str(remote / "job"), back)
    assert (back / "token.sha").read_text().split()[0] == hashlib.sha256(b"s3cr3t value\n").hexdigest()


def test_readiness_gives_up_at_the_deadline(tmp_path):
    key = tmp_path / "id"
    key.write_text("")
    shell = PodShell(SshEndpoint("127.0.0.1", 1, "nobody"), key, connect_timeout_s=1)
    with pytest.raises(RunPodError, match="did not accept our key before the deadline"):
        shell.wait_until_ready(time.monotonic() + 1.5, pause_s=0.2)
