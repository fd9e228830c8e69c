"""A :class:`PodShell` on a real sshd on the loopback: the pod side of the salvage and transfer tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gputrain.backends.runpod.pods import SshEndpoint
from gputrain.backends.runpod.ssh import PodShell, ensure_key
from tests.support.runpod_fake import LoopbackSshd


@contextmanager
def loopback_pod_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_name: str, *,
                       host: str = "127.0.0.1", extra_config: str = "") -> Iterator[PodShell]:
    """An sshd of its own under ``tmp_path`` that takes a fresh pod key from a private ``$GPUTRAIN_HOME``;
    skips where sshd is missing, except under CI, where that is a failure."""
    if LoopbackSshd.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("sshd missing: apt-get install -y openssh-server rsync")
        pytest.skip("sshd missing")
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    sshd = LoopbackSshd(tmp_path / "sshd", extra_config=extra_config).start()
    try:
        key, public = ensure_key(key_name)
        sshd.authorize(public)
        yield PodShell(SshEndpoint(host, sshd.port, sshd.user), key)
    finally:
        sshd.stop()
