"""``gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2``: real torchrun, 2 gloo ranks, registry.

The ``--set`` values below are the cpu-profile values proposed for the recipe (no-ops once they are in
it); they keep the run about a minute on two shared cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import GnnRun

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _gputrain(tmp: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    if (shutil.which("torchrun") is None or shutil.which("bash") is None) and os.environ.get("CI") != "true":
        pytest.skip("torchrun/bash not available")
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp / "home"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gputrain.cli.main", *args],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_gputrain_run_gnn_cpu_trains_reports_exports_and_records(gnn_cpu_run: GnnRun) -> None:
    tmp_path, proc = gnn_cpu_run.tmp, gnn_cpu_run.proc  # the run (tests/integration/conftest.py)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    (job_dir,) = (tmp_path / "logs").iterdir()
    assert job_dir.name.startswith("gnn_coloring_job_local-1_")
    for name in (
        "plan.json",
        "provenance.json",
        "recipe.resolved.yaml",
        "launch.sh",
        "training_output.log",
        "metrics.jsonl",
        "result.json",
        "model.onnx",
        "summary.json",
        "job_summary.txt",
        "best_model.pt",
    ):
        assert (job_dir / name).is_file(), name
    log = (job_dir / "training_output.log").read_text()
    assert "world_size=2 backend=gloo" in log
    # #31: the long phases are announced (what `run` draws on a terminal), the exporter's noise is not there
    for phase in ("GNN report (held-out families, benchmark graphs, searches)", "ONNX export and onnxruntime check"):
        assert f"[phase] {phase} ..." in log and f"[phase] {phase} done in " in log, phase
    assert "torchvision" not in out and "FutureWarning" not in out and "\x1b" not in log
    assert "dsatur" in out and "beats random-seeded search" in out  # the comparison report is printed

    result = json.loads((job_dir / "result.json").read_text())
    test = result["summary"]["test"]  # held-out graphs: validation only picked the checkpoint
    assert test["graphs"] == len(result["test_graphs"]) == 64
    # The learning signal: the network's own argmax (nothing repairs it) beats random colouring by far.
    assert test["network_conflicts_per_edge"] < 0.5 * test["random_conflicts_per_edge"], test
    assert result["network_conflicts_per_edge"] == test["network_conflicts_per_edge"]  # the job summary's line
    # what the network adds over a random-start Tabucol of the same budget, test-split means and per family
    assert result["colours_saved_vs_random_search"] == test["colours_random_search"] - test["colours_network_search"]
    # The learning assertion in colours (issue 29): with the short move budget, where the start matters, the
    # trained network's start needs fewer colours than a random one (an untrained network's needs more).
    assert result["search"] == {"algorithm": "tabucol", "moves_per_q": 2000, "short_moves_per_q": 20}
    assert result["colours_network_short_search"] < result["colours_random_short_search"], result["headline"][0]
    assert result["colours_network_short_search"] == test["colours_network_short_search"]
    assert [line.split(":")[0] for line in result["headline"]][:5] == ["test", "planted", "erdos_renyi",
                                                                       "mycielski", "queen"]
    summary_text = (job_dir / "job_summary.txt").read_text()
    assert "random-start Tabucol" in summary_text and "DSATUR" in summary_text
    assert {"planted", "erdos_renyi", "mycielski", "queen"} <= set(result["summary"])
    assert {"planted_no_more_than_dsatur_share", "families_fewer_than_dsatur", "beats_random_search"} <= set(
        result["goals"]
    )
    rows = result["test_graphs"] + result["benchmarks"]
    assert all(r["lower_bound"] <= r["colours_network_search"] for r in rows)
    assert all(r["q_source"] == "degeneracy+1" for r in rows if r["kind"] == "erdos_renyi")
    assert result["onnx"]["max_abs_diff"] <= 1e-4
    assert (result["onnx"]["check_nodes"], result["onnx"]["check_runs"]) == (10000, 20)  # default session
    assert {r["name"] for r in result["benchmarks"]} >= {"myciel3", "myciel7", "queen5_5", "queen13_13"}
    assert all(r["colours_dsatur"] >= r["chi"] for r in result["benchmarks"])

    # the safetensors export holds the best weights (best_model.pt) and colours a graph as they do
    import torch

    from gputrain.train.gnn_coloring.graphs import benchmark, featurize
    from gputrain.train.gnn_coloring.pretrained import load_pretrained

    assert result["export"]["path"] == "model"
    net = load_pretrained(job_dir / "model")
    best = torch.load(job_dir / "best_model.pt", weights_only=True)
    assert best.keys() == net.state_dict().keys()
    assert all(torch.equal(net.state_dict()[k], v) for k, v in best.items())
    graph = featurize(benchmark("queen5_5"), net.num_colors, (net.embed[0].in_features - 2), 7)
    with torch.no_grad():
        logits = net(graph.x, graph.edge_index())
    assert logits.shape == (25, net.num_colors) and logits.std() > 0

    losses = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in losses if "loss" in r]
    assert train_losses[-1] < train_losses[0]

    # the family table script reads the finished job (it crashed on plan.json's renamed "config"): smoke size
    table = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gnn_family_table.py"), str(job_dir), "--eval-graphs", "4",
         "--search-moves", "200"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=300,
    )
    assert table.returncode == 0, table.stderr[-3000:]
    assert "| planted | " in table.stdout and "random-seeded Tabucol" in table.stdout

    from gputrain.registry.store import JobRegistry

    rec = JobRegistry(tmp_path / "home" / "jobs.db").get("local-1")
    assert (rec.backend, rec.state, rec.exit_code, rec.job_dir) == ("local", "COMPLETED", 0, str(job_dir))
    assert json.loads((job_dir / "summary.json").read_text())["final"]


def test_gputrain_run_bad_override_is_one_line_error_and_writes_nothing(tmp_path: Path) -> None:
    proc = _gputrain(
        tmp_path,
        "run",
        str(REPO / "recipes" / "gnn_coloring.yaml"),
        "--gpu",
        "cpu",
        "--gpus",
        "2",
        "--set",
        "algorithm.num_colours=4",
        "--logs-dir",
        str(tmp_path / "logs"),
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "num_colours" in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_detached_run_can_be_cancelled_and_leaves_a_checkpoint(tmp_path: Path) -> None:
    import time

    from gputrain.backends.local import LocalBackend
    from gputrain.registry.store import JobRegistry

    proc = _gputrain(
        tmp_path,
        "run",
        str(REPO / "recipes" / "gnn_coloring.yaml"),
        "--gpu",
        "cpu",
        "--gpus",
        "2",
        "--set",
        "train.epochs=200",
        "--set",
        "algorithm.onnx_export=false",
        "--set",
        "data.train_size=64",
        "--logs-dir",
        str(tmp_path / "logs"),
        "--detach",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "job local-1:" in proc.stdout
    registry = JobRegistry(tmp_path / "home" / "jobs.db")
    deadline = time.monotonic() + 300
    job_dir = Path(registry.get("local-1").job_dir or "")
    while not (job_dir / "metrics.jsonl").exists() or len((job_dir / "metrics.jsonl").read_text().splitlines()) < 3:
        assert time.monotonic() < deadline, "detached run never logged 3 records"
        assert registry.get("local-1").state in ("PENDING", "RUNNING")
        time.sleep(0.5)
    assert registry.get("local-1").state == "RUNNING"
    LocalBackend(registry).cancel("local-1")
    while registry.get("local-1").state == "RUNNING":
        assert time.monotonic() < deadline, "cancelled run did not stop"
        time.sleep(0.5)
    rec = registry.get("local-1")
    assert rec.state == "CANCELLED", rec
    # the runtime saw SIGTERM and checkpointed; the folder holds one end-state marker, CANCELLED (no PREEMPTED)
    assert (job_dir / "CANCELLED").is_file() and not (job_dir / "PREEMPTED").exists()
    saved = sorted((job_dir / "checkpoints").glob("step_*/meta.json"))
    assert saved, "the cancelled run left no checkpoint"
    assert "cancelled at step" in (job_dir / "training_output.log").read_text(errors="replace")
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["final"] and summary["state"] == "CANCELLED", summary  # the registry's verdict, not PREEMPTED


def _curves(job_dir: Path) -> dict[str, dict[int, float]]:
    """step → value for the training loss and the validation loss (a resumed run's record wins)."""
    curves: dict[str, dict[int, float]] = {"loss": {}, "val_loss": {}}
    for line in (job_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, curve in curves.items():
            if key in record:
                curve[record["step"]] = record[key]
    return curves


def _torchrun_job(job_dir: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=2",
           "-m", "gputrain.train.gnn_coloring", "--plan", str(job_dir / "plan.json"), "--job-dir", str(job_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=job_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_preempted_and_resumed_run_equals_the_uninterrupted_one(tmp_path: Path) -> None:
    """Stop mid-epoch with SIGUSR1 on one rank, resume from the checkpoint: every training and validation
    loss equals the uninterrupted run's bit for bit (dropout on, so the RNG state must come back too)."""
    import signal
    import time

    small = ["data.train_size=256", "data.val_size=16", "train.epochs=3", "train.batch_size=4",
             "train.log_every=1", "algorithm.dropout=0.1", "algorithm.onnx_export=false",
             "algorithm.benchmarks=[myciel3]", "algorithm.eval_graphs=2"]
    proc = _gputrain(tmp_path, "run", str(REPO / "recipes" / "gnn_coloring.yaml"), "--gpu", "cpu", "--gpus", "2",
                     "--logs-dir", str(tmp_path / "logs"), *[a for s in small for a in ("--set", s)])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (reference,) = (tmp_path / "logs").iterdir()
    expected = _curves(reference)
    total = max(expected["loss"])
    assert total == 3 * 256 // (2 * 4) and len(expected["val_loss"]) == 3

    job = tmp_path / "resumed"
    job.mkdir()
    shutil.copy(reference / "plan.json", job / "plan.json")  # the same resolved plan, launched by hand
    run = _torchrun_job(job)
    metrics, deadline = job / "metrics.jsonl", time.monotonic() + 120
    while not metrics.exists() or len(metrics.read_text().splitlines()) < 3:
        assert run.poll() is None and time.monotonic() < deadline, "the run ended or stalled before step 3"
        time.sleep(0.02)
    workers = [int(p) for task in Path(f"/proc/{run.pid}/task").iterdir()
               for p in (task / "children").read_text().split()]
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGUSR1)  # only rank 1 is told
    out, _ = run.communicate(timeout=120)
    assert (job / "PREEMPTED").is_file(), "the run finished before the signal landed:\n" + out[-3000:]
    stopped = json.loads((job / "PREEMPTED").read_text())["step"]
    assert 3 <= stopped < total

    (job / "PREEMPTED").unlink()
    run = _torchrun_job(job)
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out[-4000:]
    assert f"resumed from step {stopped}" in out
    assert _curves(job) == expected  # bit for bit: same floats in the JSON lines
    got, want = (json.loads((d / "result.json").read_text()) for d in (job, reference))
    assert (got["best_val_loss"], got["best_step"], got["summary"]) == (
        want["best_val_loss"], want["best_step"], want["summary"])


def test_run_stopped_by_max_steps_mid_epoch_continues_that_epoch(tmp_path: Path) -> None:
    """Stop at train.max_steps inside an epoch, then raise the limit: the resumed run trains the rest of
    that epoch and the later ones (every step number once), not from the next epoch on."""
    small = ["data.train_size=128", "data.val_size=8", "train.epochs=2", "train.batch_size=4", "train.log_every=1",
             "train.max_steps=20", "algorithm.onnx_export=false", "algorithm.benchmarks=[myciel3]",
             "algorithm.eval_graphs=2"]
    proc = _gputrain(tmp_path, "run", str(REPO / "recipes" / "gnn_coloring.yaml"), "--gpu", "cpu", "--gpus", "2",
                     "--logs-dir", str(tmp_path / "logs"), *[a for s in small for a in ("--set", s)])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (job,) = (tmp_path / "logs").iterdir()
    per_epoch = 128 // (2 * 4)
    assert max(_curves(job)["loss"]) == 20 and 20 % per_epoch != 0  # stopped inside epoch 2

    plan = json.loads((job / "plan.json").read_text())
    plan["recipe"]["train"]["max_steps"] = None
    (job / "plan.json").write_text(json.dumps(plan))
    run = _torchrun_job(job)
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out[-4000:]
    assert "resumed from step 20 (epoch 1, batch 4)" in out
    steps = [json.loads(line)["step"] for line in (job / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert sorted(steps) == list(range(1, 2 * per_epoch + 1))
