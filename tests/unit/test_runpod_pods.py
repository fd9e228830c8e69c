"""Pod naming, the create body and cost arithmetic."""

from __future__ import annotations

import sys
from pathlib import Path

from gputrain.backends.runpod.billing import billed_cost
from gputrain.backends.runpod.pods import Pod, create_body, pod_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import CREATE_POD_FIELDS, validate


def test_pod_name_is_stable_and_changes_with_the_run():
    a = pod_name("gnn_coloring", "B200-192GB", 8, "me/gnn:1", {"train": {"lr": 1}})
    assert a == pod_name("gnn_coloring", "B200-192GB", 8, "me/gnn:1", {"train": {"lr": 1}})
    assert a.startswith("gputrain-gnn-coloring-b200-192gbx8-")
    assert a != pod_name("gnn_coloring", "B200-192GB", 8, "me/gnn:1", {"train": {"lr": 2}})
    assert a != pod_name("gnn_coloring", "B200-192GB", 4, "me/gnn:1", {"train": {"lr": 1}})


def test_create_body_follows_the_contract_and_opens_ssh():
    body = create_body(name="gputrain-x", image="me/gnn:1", gpu_id="NVIDIA B200", gpu_count=8, disk_gb=100,
                       volume_gb=5, env={"MODE": "a"}, public_key="ssh-ed25519 AAAA k", cloud="COMMUNITY",
                       data_centers=["EU-RO-1"], min_cuda="12.8")
    assert validate(body, CREATE_POD_FIELDS) == []
    assert body["ports"] == ["22/tcp"] and body["env"]["PUBLIC_KEY"] == "ssh-ed25519 AAAA k"
    assert body["gpu"] == {"id": "NVIDIA B200", "count": 8, "minCudaVersion": "12.8"}
    assert body["mounts"]["persistent"]["size"] == 10  # the API's floor


def test_fake_contract_rejects_what_the_api_rejects():
    bad = {"name": "", "gpu": {"id": "x", "count": 0, "extra": 1}, "bogus": True}
    errors = validate(bad, CREATE_POD_FIELDS)
    assert "$: additional properties 'bogus' not allowed" in errors
    assert "$.gpu: additional properties 'extra' not allowed" in errors
    assert any(e.startswith("$.name") for e in errors) and any(e.startswith("$.gpu.count") for e in errors)


def test_pod_from_api_reads_direct_ssh_and_cost():
    direct = {"host": "1.2.3.4", "port": 4242, "username": "root", "command": "ssh"}
    pod = Pod.from_api({"id": "p1", "name": "n", "status": "RUNNING", "cost": 2.5,
                        "gpu": {"id": "g", "count": 2}, "ssh": {"proxy": None, "direct": direct}})
    assert pod.ready_for_ssh and pod.ssh_direct.port == 4242 and pod.gpu_count == 2
    unpublished = Pod.from_api({"id": "p", "status": "RUNNING", "ssh": {"proxy": None, "direct": None}})
    assert not unpublished.ready_for_ssh
    cost, uptime = billed_cost(pod.cost_per_hour, None, 1000.0, 1000.0 + 1800)
    assert (cost, uptime) == (1.25, 1800.0)


def test_billed_cost_counts_from_the_pods_creation_not_the_training():
    # created at 12:00:00 by the API's clock; our own record says 12:00:30; terminated at 13:00:00
    created = "2026-03-13T12:00:00Z"
    start = 1773403200.0  # 2026-03-13T12:00:00Z
    cost, uptime = billed_cost(3.0, created, start + 30, start + 3600)
    assert uptime == 3600.0 and abs(cost - 3.0) < 1e-9
    assert billed_cost(3.0, "garbled", start, start + 1200) == (1.0, 1200.0)


def test_pod_owner_label_comes_from_its_env():
    pod = Pod.from_api({"id": "p", "status": "RUNNING", "env": {"GPUTRAIN_OWNER": "laptop/1a2b3c4d"}})
    assert pod.owner == "laptop/1a2b3c4d"
    assert Pod.from_api({"id": "p", "status": "RUNNING", "env": {}}).owner is None
