"""Rank 0's half of ``provenance.json``: what the training process itself runs on (written once, at start).

The launching machine recorded what it had installed and checked out (``launch``); the node may differ (a
Slurm compute node's venv, a RunPod image), so the training adds ``runtime``: the library versions it
imports, ``torch.version.cuda``, cuDNN, the device names and the NVIDIA driver. A resumed or requeued job
keeps the first record: it describes the job's start.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from gputrain.contract.provenance import PROVENANCE_FILE, library_versions, nvidia_driver


def runtime_record(device: torch.device) -> dict[str, Any]:
    cuda = device.type == "cuda" and torch.cuda.is_available()
    return {
        "recorded_at": time.time(),
        "host": platform.node(),
        "libraries": library_versions(),
        "torch_build": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "driver": nvidia_driver() if cuda else None,
    }


def record_runtime(job_dir: Path, device: torch.device) -> None:
    """Add ``runtime`` to the job folder's ``provenance.json`` unless it is already there (rank 0 only)."""
    from gputrain.atomic import write_atomic

    path = job_dir / PROVENANCE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    if isinstance(data.get("runtime"), dict):
        return
    data["runtime"] = runtime_record(device)
    try:
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError as exc:  # a record never stops a training
        print(f"[runtime] cannot write {path}: {exc.strerror}", flush=True)
