"""The v2 client against the project's fake API over real HTTP on 127.0.0.1: retries, lost creates,
problem objects, capacity, secrets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gputrain.backends.runpod.api import (
    RunPodCapacityError,
    RunPodClient,
    load_api_key,
    problem_message,
    redact,
    retry_after_s,
)
from gputrain.backends.runpod.pods import create_body
from gputrain.errors import RunPodError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod

KEY = "rp_canary_unit_0123456789"


@pytest.fixture
def fake():
    with FakeRunPod(api_key=KEY) as server:
        yield server


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def client(fake, sleeps):
    c = RunPodClient(KEY, fake.base_url, sleep=sleeps.append, max_attempts=4)
    yield c
    c.close()


def body(name="gputrain-t-1", **kw):
    args = dict(name=name, image="me/img:1", gpu_id="NVIDIA B200", gpu_count=8, disk_gb=100, volume_gb=None,
                env={"A": "1"}, public_key="ssh-ed25519 AAAA test", cloud="SECURE", data_centers=None,
                min_cuda="12.8")
    args.update(kw)
    return create_body(**args)


def test_429_waits_retry_after_then_succeeds(fake, client, sleeps):
    fake.fail_next("GET", "/v2/pods", 429, retry_after=7)
    assert client.list_pods() == []
    assert sleeps == [7.0]
    assert fake.count("GET", "/v2/pods") == 2


def test_5xx_on_reads_retried_with_growing_backoff(fake, client, sleeps):
    fake.fail_next("GET", "/v2/pods", 500, times=2)
    client.list_pods()
    assert sleeps == [1.0, 2.0]
    assert fake.count("GET", "/v2/pods") == 3


def test_5xx_that_persists_becomes_one_line_error(fake, client):
    fake.fail_next("GET", "/v2/pods", 503, times=10, detail="upstream\nunavailable")
    with pytest.raises(RunPodError) as err:
        client.list_pods()
    assert "503" in str(err.value) and "\n" not in str(err.value)
    assert fake.count("GET", "/v2/pods") == 4


def test_401_names_the_variable_but_never_the_key(fake):
    with RunPodClient("wrong-key", fake.base_url) as c, pytest.raises(RunPodError) as err:
        c.list_pods()
    assert "401" in str(err.value) and "RUNPOD_API_KEY" in str(err.value)
    assert "wrong-key" not in str(err.value)


def test_create_is_retried_on_429_only_once_created(fake, client, sleeps):
    fake.fail_next("POST", "/v2/pods", 429, retry_after=3)
    pod = client.create_pod(body())
    assert pod.status == "PROVISIONING" and sleeps == [3.0]
    assert len(fake.live_pods()) == 1


def test_create_with_lost_answer_finds_the_pod_by_name_instead_of_creating_again(fake, client):
    fake.fail_next("POST", "/v2/pods", 201, drop=True)
    pod = client.create_pod(body(name="gputrain-lost-1"))
    assert pod.name == "gputrain-lost-1"
    assert fake.count("POST", "/v2/pods") == 1
    assert [p["id"] for p in fake.live_pods()] == [pod.id]


def test_create_5xx_is_not_retried_and_points_to_list_and_down(fake, client):
    fake.fail_next("POST", "/v2/pods", 502, times=5)
    with pytest.raises(RunPodError, match="check `gputrain runpod list` before running `up` again"):
        client.create_pod(body())
    assert fake.count("POST", "/v2/pods") == 1
    assert fake.live_pods() == []


def test_capacity_refusal_has_its_own_type(fake, client):
    fake.no_capacity.add("SECURE")
    with pytest.raises(RunPodCapacityError, match="no longer any instances"):
        client.create_pod(body())
    assert client.create_pod(body(cloud="COMMUNITY")).cloud == "COMMUNITY"


def test_unknown_field_is_rejected_like_the_contract_says(fake, client):
    bad = body()
    bad["bogus"] = 1
    with pytest.raises(RunPodError) as err:
        client.create_pod(bad)
    assert "422" in str(err.value) and "additional properties 'bogus'" in str(err.value)


def test_delete_404_counts_as_gone(fake, client):
    pod = client.create_pod(body())
    assert client.delete_pod(pod.id) is True
    assert client.delete_pod(pod.id) is False
    assert fake.live_pods() == []


def test_pod_moves_to_running_and_publishes_ssh_one_poll_late(fake, client):
    pod = client.create_pod(body())
    seen = [(p.status, p.ssh_direct is not None) for p in (client.get_pod(pod.id) for _ in range(3))]
    assert seen == [("STARTING", False), ("RUNNING", False), ("RUNNING", True)]


def test_debug_output_redacts_key_and_env(fake, capsys):
    with RunPodClient(KEY, fake.base_url, debug=True) as c:
        c.create_pod(body(env={"SECRETISH": "value-123"}))
    err = capsys.readouterr().err
    assert "POST" in err and KEY not in err and "value-123" not in err and "ssh-ed25519" not in err


def test_redact_handles_nested_env_and_headers():
    out = redact({"headers": {"Authorization": "Bearer x"}, "json": {"env": {"A": "b"}, "name": "n"}})
    assert out == {"headers": {"Authorization": "***"}, "json": {"env": {"A": "***"}, "name": "n"}}


def test_api_key_from_env_then_runpod_config(tmp_path):
    assert load_api_key({"RUNPOD_API_KEY": " k1 "}, home=tmp_path) == "k1"
    with pytest.raises(RunPodError, match="RUNPOD_API_KEY is not set"):
        load_api_key({}, home=tmp_path)
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text('[default]\napi_key = "k2"\n')
    assert load_api_key({}, home=tmp_path) == "k2"


def test_problem_message_is_one_line_with_errors():
    msg = problem_message(422, {"title": "Unprocessable", "status": 422, "detail": "bad\nbody",
                                "errors": ["$.gpu: x", "$.disk: y"]}, "create pod")
    assert msg == "RunPod API create pod failed: 422 Unprocessable: bad body ($.gpu: x; $.disk: y)"


def test_retry_after_forms():
    assert retry_after_s("12") == 12.0
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "runpod-v2-openapi.json"


@pytest.mark.skipif(not REFERENCE.exists(), reason="the OpenAPI document is optional outside this workspace")
def test_fake_answers_and_our_body_match_the_published_schemas(fake, client):
    jsonschema = pytest.importorskip("jsonschema")
    doc = json.loads(REFERENCE.read_text())

    def check(name, instance):
        schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
        jsonschema.Draft202012Validator(schema).validate(instance)

    b = body(volume_gb=20, data_centers=["US-TX-3"])
    check("CreatePodRequest", b)
    pod = client.create_pod(b)
    for _ in range(3):
        client.get_pod(pod.id)
    listed = client._json("GET", "/v2/pods", what="list")
    check("ListPodsResponse", listed)
    assert listed["pods"][0]["ssh"]["direct"] is not None


# -- faults from the field (#30 points 8, 10, 11) ------------------------------------------------------------
def test_lost_create_keeps_looking_for_a_pod_the_server_makes_late(fake):
    fake.fail_next("POST", "/v2/pods", 201, drop=True, late_s=0.5)
    with RunPodClient(KEY, fake.base_url, lost_create_s=10, lost_create_poll_s=0.2) as c:
        pod = c.create_pod(body(name="gputrain-late-1"))
    assert pod.name == "gputrain-late-1" and [p["id"] for p in fake.live_pods()] == [pod.id]
    assert fake.count("POST", "/v2/pods") == 1  # found, never created twice


def test_lost_create_never_says_nothing_was_started_and_points_to_list_and_down(fake):
    fake.fail_next("POST", "/v2/pods", 201, drop=True, late_s=30)
    with RunPodClient(KEY, fake.base_url, lost_create_s=0.4, lost_create_poll_s=0.1) as c, \
            pytest.raises(RunPodError) as err:
        c.create_pod(body(name="gputrain-late-2"))
    text = str(err.value)
    assert "nothing was started" not in text and "run `up` again" not in text.split("before")[0]
    assert "gputrain runpod list" in text and "gputrain runpod down gputrain-late-2" in text
    assert fake.count("GET", "/v2/pods") >= 2  # looked more than once


def test_create_still_rate_limited_says_so_with_the_next_step(fake, client, sleeps):
    fake.fail_next("POST", "/v2/pods", 429, retry_after=2, times=10)
    with pytest.raises(RunPodError) as err:
        client.create_pod(body())
    text = str(err.value)
    assert "still rate limited (429) after 4 tries" in text and "nothing was created" in text
    assert "run `up` again" in text and sleeps == [2.0, 2.0, 2.0]
    assert fake.live_pods() == []


HTML_502 = ("<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway"
            "</h1></center><hr><center>cloudflare</center>" + "<p>padding</p>" * 40 + "</body></html>\n")


def test_html_error_page_is_one_line_naming_its_title_not_the_page(fake, client):
    fake.fail_next("GET", "/v2/pods", 502, raw=HTML_502, times=10)
    with pytest.raises(RunPodError) as err:
        client.list_pods()
    text = str(err.value)
    assert "502" in text and "Bad Gateway" in text and "<" not in text and "padding" not in text
    assert "\n" not in text and len(text) < 200


def test_html_with_status_200_is_one_line_error(fake, client):
    fake.fail_next("GET", "/v2/pods", 200, raw="<html><title>Maintenance</title></html>")
    with pytest.raises(RunPodError, match=r"HTML page \(Maintenance\), not JSON"):
        client.list_pods()


def test_wrong_field_type_names_the_field(fake, client):
    raw = json.dumps({"pods": [{"id": "abc", "name": "gputrain-x", "status": "RUNNING", "cost": "0.50/h"}]})
    fake.fail_next("GET", "/v2/pods", 200, raw=raw, content_type="application/json")
    with pytest.raises(RunPodError) as err:
        client.list_pods()
    assert "'cost' is '0.50/h', not a number" in str(err.value)
