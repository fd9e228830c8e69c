"""A cluster without internet, for real: prepare from a local hub, train on Slurm with no network, sync after.

The hub is :class:`tests.support.hub_server.HubServer` (a real HTTP server; the real ``huggingface_hub`` and
``datasets`` download code runs against it through ``HF_ENDPOINT``), serving a tiny Qwen2 and a tiny MBPP
built by the real libraries. The cluster is the 2-node Slurm testbed with an ``offline: true`` profile whose
``python:`` is a wrapper that starts the interpreter in a fresh network namespace (``unshare --net``, only
loopback up): the GRPO code job there cannot reach the hub, or anything else, and must complete from the
cache ``gputrain prepare`` filled. Without ``prepare``, ``submit`` refuses and names the command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_tool
from tests.support.cli import gputrain as run_gputrain
from tests.support.hub_repos import DATASET_REPO, MODEL_REPO, tiny_mbpp_repo, tiny_model_repo
from tests.support.hub_server import HubServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECIPE = {
    "name": "offline_code",
    "entrypoint": "grpo_code",
    "model": {"name": MODEL_REPO, "size": "tiny", "params": 1.0e5, "hidden_size": 32, "num_layers": 2,
              "num_heads": 4, "vocab_size": 300, "seq_len": 64},
    "data": {"source": DATASET_REPO, "split": "train"},
    "train": {"batch_size": 4, "max_steps": 2, "learning_rate": 1.0e-3, "precision": "fp32", "log_every": 1,
              "save_every": 2},
    "algorithm": {"num_generations": 4, "max_prompt_length": 48, "max_completion_length": 4,
                  "rollout_engine": "hf", "beta": 0.0, "sandbox_timeout_s": 3.0, "sandbox_workers": 1,
                  "eval_dataset": "held_out"},
    "distributed": {"backend": "gloo"},
    "resources": {"gpus": 1, "time": "00:10:00", "memory_gb": 2, "cpus_per_gpu": 1},
    "tracking": {"wandb": True, "tensorboard": True, "project": "gputrain-offline-test"},
}
NO_NETWORK_WRAPPER = """#!/bin/sh
# The interpreter of a compute node without internet: a fresh network namespace, only loopback up.
exec unshare --net -- sh -c 'ip link set lo up && echo "[node] netns $(readlink /proc/self/ns/net)" >&2 \
&& exec "$0" "$@"' {python} "$@"
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    repos = tmp_path_factory.mktemp("hub-repos")
    with HubServer({("model", MODEL_REPO): tiny_model_repo(repos / "model"),
                    ("dataset", DATASET_REPO): tiny_mbpp_repo(repos / "dataset")}) as server:
        yield server


@pytest.fixture(scope="module")
def slurm() -> None:
    require_tool("sbatch")
    require_tool("unshare")
    require_tool("ip")
    if subprocess.run(["sinfo", "-h"], capture_output=True, timeout=60).returncode != 0:
        up = subprocess.run([str(ROOT / "scripts" / "slurm-testbed"), "up"], capture_output=True, text=True,
                            timeout=600)
        if up.returncode != 0:
            if os.environ.get("CI") == "true":
                pytest.fail(f"slurm testbed did not come up: {up.stderr.strip()[-500:]}")
            pytest.skip("slurm testbed unavailable")
    probe = subprocess.run(["unshare", "--net", "--", "ip", "link", "set", "lo", "up"], capture_output=True)
    if probe.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"unshare --net does not work here: {probe.stderr!r}")
        pytest.skip("unshare --net needs privileges this machine does not give")


@pytest.fixture
def site(tmp_path: Path, hub: HubServer) -> dict[str, Any]:
    """A work folder with the recipe, an offline cluster profile and the environment pointing at the hub."""
    wrapper = tmp_path / "node-python"
    wrapper.write_text(NO_NETWORK_WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    cache = tmp_path / "hf-cache"
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump({"offline-testbed": {
        "description": "the testbed as a site without internet", "gpu": "V100-32GB", "gpus_per_node": 2,
        "gres_type": "volta", "partition": "debug", "max_time": "00:30:00", "cpus_per_gpu": 1,
        "signal_seconds": 30, "offline": True, "cache_dir": str(cache), "python": str(wrapper),
    }}))
    recipe = tmp_path / "offline_code.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "clusters.yaml"),
           "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "user-hf-home"), "WANDB_MODE": "offline",
           "PYTHONPATH": str(ROOT)}
    env.pop("WANDB_API_KEY", None)
    return {"dir": tmp_path, "recipe": recipe, "cache": cache, "env": env}


def gt(site: dict[str, Any], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_gputrain(*args, cwd=site["dir"], env=site["env"], timeout=timeout)


def wait_final(site: dict[str, Any], job_id: str, timeout: float = 480) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        proc = gt(site, "status", job_id, "--json")
        info = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if info.get("state") in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}:
            return info
        time.sleep(3)
    subprocess.run(["scancel", "--", job_id], capture_output=True)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: {info}")


def test_prepared_job_trains_with_no_network_and_unprepared_submit_refuses(
        slurm: None, hub: HubServer, site: dict[str, Any]) -> None:
    recipe, cluster = str(site["recipe"]), ["--cluster", "offline-testbed", "--gpu", "cpu", "--gpus", "1"]

    # 1. Not prepared: one line naming what is missing and the command; nothing submitted, nothing recorded.
    refused = gt(site, "submit", recipe, *cluster)
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert f"model {MODEL_REPO}" in line and f"dataset {DATASET_REPO}" in line
    assert f"gputrain prepare {recipe} --cluster offline-testbed --gpu cpu" in line
    assert not (site["dir"] / "logs").exists() or not any((site["dir"] / "logs").iterdir())

    # 2. prepare: only the files the training loads, verified, recorded; a second run fetches nothing.
    before = len(hub.downloads())
    first = gt(site, "prepare", recipe, "--cluster", "offline-testbed", "--gpu", "cpu", "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    fetched = hub.downloads()[before:]
    model_files = {p.rsplit("/", 1)[-1] for p in fetched if not p.startswith("/datasets/")}
    assert model_files == {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"}, "not the README, not the duplicate pytorch_model.bin"
    assert any(p.endswith("train-00000-of-00001.parquet") for p in fetched)
    by_kind = {r["kind"]: r for r in report["repos"]}
    assert by_kind["model"]["commit"] == hub.repos[("model", MODEL_REPO)].commit
    assert by_kind["dataset"]["cache_files"], "the datasets Arrow cache an offline load reads"
    assert report["cache_dir"] == str(site["cache"]) and report["bytes"] > 100_000
    again = gt(site, "prepare", recipe, "--cluster", "offline-testbed", "--gpu", "cpu", "--json")
    assert again.returncode == 0, again.stderr
    assert len(hub.downloads()) == before + len(fetched), "a second prepare downloaded again"
    assert all(r["downloaded"] == [] for r in json.loads(again.stdout)["repos"])

    # 3. submit: the plan pins the commits; the job runs in a network namespace and completes.
    submitted = gt(site, "submit", recipe, *cluster, "--json")
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    job_dir = Path(job["job_dir"])
    requests_at_submit = len(hub.requests)
    info = wait_final(site, job["job_id"])
    log = (job_dir / "training_output.log").read_text(errors="replace")
    assert info["state"] == "COMPLETED", log[-3000:]
    assert len(hub.requests) == requests_at_submit, "the job reached the hub"
    host_netns = os.readlink("/proc/self/ns/net")
    node_netns = {ln.split("netns ", 1)[1].strip() for ln in log.splitlines() if "[node] netns" in ln}
    assert node_netns and host_netns not in node_netns, "training did not run in its own network namespace"
    plan = json.loads((job_dir / "plan.json").read_text())
    assert {r["item"]["repo"]: r["commit"] for r in plan["offline"]["repos"]} == {
        MODEL_REPO: hub.repos[("model", MODEL_REPO)].commit,
        DATASET_REPO: hub.repos[("dataset", DATASET_REPO)].commit}
    script = (job_dir / "job.sbatch").read_text()
    assert "export HF_HUB_OFFLINE=1" in script and f"export HF_HOME={site['cache']}" in script
    assert (job_dir / "result.json").exists() or (job_dir / "summary.json").exists()

    # 4. sync: the job's offline W&B run would upload (no server needed to tell); TensorBoard files listed.
    synced = gt(site, "sync", job["job_id"], "--dry-run", "--json")
    assert synced.returncode == 0, synced.stderr
    report = json.loads(synced.stdout)
    assert len(report["would_upload"]) == 1 and "offline-run-" in report["would_upload"][0]
    assert "Would sync 1 run" in report["wandb_output"]
    assert report["tensorboard_files"], "the job wrote TensorBoard events"
    no_key = gt(site, "sync", job["job_id"])
    assert no_key.returncode == 2 and "WANDB_API_KEY" in no_key.stderr
