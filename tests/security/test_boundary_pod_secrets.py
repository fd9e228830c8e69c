"""Red-team round 4 — a pod cannot make gputrain write the secrets it forwarded into errors, logs or files.

``runpod up`` hands the recipe's secrets (``HF_TOKEN``, ...) to the pod as shell assignments on ssh's stdin.
When the launch command failed, its output went into the error — and from there into the terminal, the
run's ``runpod.json``, the registry's ``reason`` and the job summary. A hostile or broken pod image (here:
the loopback sshd's ``ForceCommand`` echoes stdin and fails, as a shell with ``set -v`` or a debugging image
does) thus got the user's token written into the launcher's terminal and files.
Now every forwarded value is masked in whatever the pod says back. Real sshd, real ssh.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputrain.backends.runpod.pods import SshEndpoint
from gputrain.backends.runpod.remote import RemoteRun
from gputrain.backends.runpod.ssh import PodShell, ensure_key
from gputrain.errors import RunPodError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import LoopbackSshd

pytestmark = pytest.mark.integration  # a real sshd: about 1.5 s
TOKEN = "hf_CANARY_pod_echo_5b8e1f"
OTHER = "wandb secret with spaces 'and quotes'"


@pytest.fixture
def echoing_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PodShell]:
    if LoopbackSshd.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("sshd missing: apt-get install -y openssh-server")
        pytest.skip("sshd missing")
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    # The image's sshd runs its own command instead of ours: it prints what it was fed, then fails.
    sshd = LoopbackSshd(tmp_path / "sshd", extra_config="ForceCommand cat; exit 3\n").start()
    key, public = ensure_key("gputrain-secret-echo-test")
    sshd.authorize(public)
    try:
        yield PodShell(SshEndpoint("127.0.0.1", sshd.port, sshd.user), key)
    finally:
        sshd.stop()


def test_a_failing_launch_never_repeats_the_forwarded_secrets(tmp_path: Path, echoing_pod: PodShell) -> None:
    remote = tmp_path / "pod"
    remote.mkdir()
    exports = f"HF_TOKEN={shlex.quote(TOKEN)}\nWANDB_API_KEY={shlex.quote(OTHER)}\n"
    with pytest.raises(RunPodError) as info:
        RemoteRun(echoing_pod, str(remote)).launch(exports)
    message = str(info.value)
    assert "exit 3" in message and "HF_TOKEN=" in message  # the pod's output is still shown, by name
    assert TOKEN not in message and "CANARY" not in message, message
    assert "wandb secret" not in message, message
