"""The GNN colouring recipe's `cpu` profile as a 2-node x 1-rank Slurm job on the testbed.

The training is made small (#26), as the RunPod end-to-end test's (``SMALL_GNN_TRAINING``): this test is about
the recipe running across two nodes (rendezvous, both ranks, metrics, plan, result), not what the model learns,
which ``test_gnn_run.py`` holds the full ``cpu`` profile to. It sat in the Slurm suite's serial chain.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import SMALL_GNN_TRAINING
from tests.integration.test_slurm_testbed import FINAL, ROOT, gt, testbed, wait_for, workdir  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_gnn_cpu_profile_on_two_nodes(testbed: None, workdir: Path) -> None:  # noqa: F811
    out = gt(workdir, "submit", str(ROOT / "recipes" / "gnn_coloring.yaml"), "--cluster", "testbed",
             "--gpu", "cpu", "--nodes", "2", "--gpus", "1", "--json",
             *(arg for value in SMALL_GNN_TRAINING for arg in ("--set", value)),
             # one epoch of 64 graphs on 2 ranks: 2 steps, each logged; no ONNX export (one rank's, after the
             # training: 22 s of this job under load), which test_gnn_run.py and the pod's run hold
             "--set", "train.log_every=1", "--set", "algorithm.onnx_export=false")
    info = json.loads(out.stdout)
    job_id, job_dir = info["job_id"], Path(info["job_dir"])
    final = wait_for(workdir, job_id, FINAL, timeout=900)
    log = (job_dir / "training_output.log").read_text()
    assert final["state"] == "COMPLETED", log[-3000:]
    assert final["nodes"] == "n[1-2]"
    records = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert records and records[-1]["step"] > records[0]["step"]
    assert json.loads((job_dir / "plan.json").read_text())["world_size"] == 2
    assert (job_dir / "result.json").is_file()
