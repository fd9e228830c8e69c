"""Red-team round 4 — what the RunPod API says is data, on the terminal too.

#25.13 made the *pod's output* terminal-safe; the API's own fields were still printed as they came. The
attacks (a compromised or impersonated API — ``GPUTRAIN_RUNPOD_API_URL`` — or any pod of the account,
whose name its creator chose): a pod name, status or GPU id carrying an OSC 52 clipboard write, a screen
clear or a one-byte C1 CSI, shown by ``runpod list --all``, ``runpod status`` and ``runpod down``; and an
RFC 9457 error ``detail`` with C1 controls, which reached the ``error:`` line (only C0 was made visible).
Real fake API over HTTP, the real CLI commands.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputrain.backends.runpod.api import RunPodClient
from gputrain.cli.runpod import app
from gputrain.errors import RunPodError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod

KEY = "rp_terminal_canary_3"
#: What a terminal would act on: C0 but tab and newline, DEL, C1 (U+0080-U+009F, the one-byte CSI/OSC/ST).
ACTS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CLIPBOARD = "\x1b]52;c;ZWNobyBvd25lZA==\x07"  # OSC 52: write "echo owned" into the clipboard
C1_CSI = "\x9b2J"  # one-byte CSI: clear the screen
C1_OSC = "\x9d52;c;ZWNobyBvd25lZA==\x9c"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    server = FakeRunPod(api_key=KEY).start()
    monkeypatch.setenv("GPUTRAIN_RUNPOD_API_URL", server.base_url)
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    yield server
    server.stop()


def _hostile_pod(fake: FakeRunPod) -> str:
    _, pod = fake._create({"name": "placeholder", "image": "me/x:1", "gpu": {"id": "NVIDIA B200", "count": 1}})
    with fake.lock:
        stored = fake.pods[pod["id"]]
        stored.update(name=f"gputrain-x{CLIPBOARD}", status=f"RUNNING{C1_CSI}", cloud=f"SECURE{C1_OSC}",
                      dataCenterId="\x1b[2J", gpu={"id": f"B200{C1_CSI}", "count": 1})
    return str(pod["id"])


def test_api_fields_never_reach_the_terminal_as_controls(fake: FakeRunPod) -> None:
    pod_id = _hostile_pod(fake)
    runner = CliRunner()
    for args in (["list", "--all"], ["status", pod_id], ["down", pod_id]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "gputrain-x" in result.output  # the pod is still shown
        found = ACTS.findall(result.output)
        assert not found, f"runpod {' '.join(args)} printed {found!r}"
    assert fake.live_pods() == []  # down still terminated it


def test_an_api_error_detail_cannot_drive_the_terminal(fake: FakeRunPod) -> None:
    fake.fail_next("GET", "/v2/pods", 400, detail=f"bad request {C1_OSC} {C1_CSI} {CLIPBOARD}")
    with RunPodClient(KEY, fake.base_url, max_attempts=1) as client, pytest.raises(RunPodError) as info:
        client.list_pods()
    message = str(info.value)
    assert "bad request" in message
    assert not ACTS.findall(message), message


@pytest.mark.parametrize(("field", "value"), [("createdAt", 1732600000), ("createdAt", {"t": 1}),
                                              ("cloud", ["SECURE"]), ("dataCenterId", 7)])
def test_an_api_field_of_the_wrong_type_is_one_line_not_a_traceback(fake: FakeRunPod, field: str,
                                                                     value: object) -> None:
    pod_id = _hostile_pod(fake)
    with fake.lock:
        fake.pods[pod_id][field] = value
    result = CliRunner().invoke(app, ["status", pod_id])
    assert isinstance(result.exception, RunPodError), repr(result.exception)
    message = str(result.exception)
    assert field in message and "\n" not in message, message


def test_a_deeply_nested_api_answer_is_one_line_not_a_traceback(fake: FakeRunPod) -> None:
    """A hostile API answers with JSON nested 100 000 deep (the parser's recursion limit): the list, the
    pod lookups and the container log must fail in one line, never with a RecursionError traceback."""
    deep = "[" * 100_000 + "]" * 100_000
    fake.fail_next("GET", "/v2/pods", 200, raw=deep, content_type="application/json")
    with RunPodClient(KEY, fake.base_url, max_attempts=1) as client, pytest.raises(RunPodError) as info:
        client.list_pods()
    assert "\n" not in str(info.value)
    pod_id = _hostile_pod(fake)
    fake.fail_next("GET", f"/v2/pods/{pod_id}/logs", 200, raw=f"data: {{\"line\": {deep}}}\n\n",
                   content_type="text/event-stream")
    with RunPodClient(KEY, fake.base_url, max_attempts=1) as client:
        assert client.pod_logs(pod_id, idle_s=0.5) == []
