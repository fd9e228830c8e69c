"""Red-team round 5 — the pod's ssh host from the RunPod API is an address or a host name, never an option,
and an IPv6 address reaches the pod.

The attacks, on the tree before this round:

- The API's ``ssh.direct.host`` was checked with ``ipaddress.ip_address`` (else a host-name pattern), which
  accepts an IPv6 *scope id* of any text: ``fe80::1%-oProxyCommand=id`` or ``fe80::1%x y`` passed as a
  valid address. A pod's public address never has one (it names an interface of *this* machine).
- ``rsync``/``scp`` read ``user@host:path`` up to the first colon, so an unbracketed IPv6 address named
  another host: ``root@2001:db8::7:/workspace/job`` is host ``2001`` for both tools (a name the resolver
  may answer, with a known_hosts that accepts a new key), and ``root@::1:/job`` an empty host. Checked with
  the real tools against this machine's sshd on ``::1``: both copies failed. ``ssh`` itself wants the address
  bare (``root@[::1]`` does not resolve), so only the copy forms take brackets.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputrain.backends.runpod.pods import Pod, SshEndpoint
from gputrain.backends.runpod.ssh import PodShell
from gputrain.errors import RunPodError
from tests.support.pod_shell import loopback_pod_shell


@pytest.mark.parametrize("host", [
    "fe80::1%-oProxyCommand=id",  # a scope id is free text to ipaddress
    "fe80::1%eth0",  # an interface of this machine, never a pod's public address
    "::1%x y",
    "-oProxyCommand=id",
    "[2001:db8::7]",  # brackets are ours to add, not the API's
    "2001:db8::7]:22",
    "host name",
])
def test_an_api_host_that_is_not_an_address_or_host_name_is_refused(host: str) -> None:
    with pytest.raises(RunPodError, match="not a host name or address"):
        SshEndpoint(host, 22, "root")
    pod = Pod.from_api({"id": "p1", "name": "gputrain-x", "status": "RUNNING",
                        "ssh": {"direct": {"host": host, "port": 22, "username": "root"}}})
    assert pod.ssh_direct is None and pod.ssh_problem is not None


def test_an_ipv6_pod_is_reached_bare_by_ssh_and_bracketed_by_the_copy_tools(tmp_path: Path) -> None:
    shell = PodShell(SshEndpoint("2001:db8::7", 2222, "root"), tmp_path / "id_ed25519")
    assert shell.ssh_argv("true")[-3:] == ["--", "root@2001:db8::7", "true"]
    assert shell.remote("/workspace/job/.") == "root@[2001:db8::7]:/workspace/job/."
    v4 = PodShell(SshEndpoint("203.0.113.9", 22, "root"), tmp_path / "id_ed25519")
    assert v4.remote("/w") == "root@203.0.113.9:/w"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.fixture
def shell6(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PodShell]:
    if not _ipv6_loopback():
        # a property of the machine's network, not of an install CI makes: .ci/run turns ::1 on where the
        # kernel allows it; a container without IPv6 has no IPv6 pod to reach either (the argv test holds)
        pytest.skip("this machine has no IPv6 loopback (::1)")
    with loopback_pod_shell(tmp_path, monkeypatch, "gputrain-ipv6-test", host="::1",
                            extra_config="ListenAddress ::1\n") as shell:
        yield shell


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("use_rsync", [True, False], ids=["rsync", "scp"])
def test_an_ipv6_pod_takes_uploads_and_gives_downloads(shell6: PodShell, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, use_rsync: bool) -> None:
    if not use_rsync:
        monkeypatch.setattr(PodShell, "_rsync_ok", lambda self: False)
    src = tmp_path / "bundle"
    src.mkdir()
    (src / "plan.json").write_text('{"ok": true}')
    remote = tmp_path / "pod"
    shell6.upload([src / "plan.json"], str(remote))
    assert (remote / "plan.json").read_text() == '{"ok": true}'
    (remote / "job").mkdir()
    (remote / "job" / "metrics.jsonl").write_text('{"step": 1}\n')
    back = tmp_path / "back"
    shell6.download_paths([f"{remote}/job/metrics.jsonl"], back)
    assert (back / "metrics.jsonl").read_text() == '{"step": 1}\n'
