"""Slurm cluster profiles: the site facts a recipe does not know (partition, GRES spelling, set-up lines).

Built-ins ``supercloud`` and ``testbed`` ship here; users add their own in
``~/.config/gputrain/clusters.yaml`` (or the file named by ``$GPUTRAIN_CONFIG``) as a mapping
``name -> profile``. A user profile with a built-in's name replaces it. Example::

    mylab:
      gpu: A100-80GB
      gpus_per_node: 4
      gres_style: plain
      partition: gpu
      setup: ["module load cuda/12.1"]

How a profile shapes a job script is :mod:`gputrain.render.sbatch`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gputrain import safeyaml
from gputrain.contract.cluster import ClusterProfile, GresStyle
from gputrain.errors import ClusterProfileError, unknown_name

__all__ = ["BUILTIN_CLUSTERS", "ClusterProfile", "GresStyle", "config_path", "list_clusters", "load_cluster"]


BUILTIN_CLUSTERS: dict[str, dict[str, Any]] = {
    # From the LLSC SuperCloud documentation: 2x V100-32GB and 40 cores per node, partition xeon-g6-volta,
    # about 20 CPUs per GPU (memory comes with the cores: no --mem), anaconda module set-up, batch jobs up
    # to 4 days, 2 GPUs per new user (8 after a course), no internet on compute nodes, Slurm 20.11
    # (no option newer than that), node-local $TMPDIR. The preemption warning grows with the checkpoint
    # (gputrain.render.node_env.preemption_seconds) at a conservative 250 MB/s per node to Lustre.
    "supercloud": {
        "description": "MIT SuperCloud: 2x V100-32GB per node (gpu:volta:2), no internet on compute nodes",
        "gpu": "V100-32GB",
        "gpus_per_node": 2,
        "gres_type": "volta",
        "gres_style": "typed",
        "partition": "xeon-g6-volta",
        "max_time": "4-00:00:00",
        "cpus_per_gpu": 20,
        "setup": ["source /etc/profile", "module load anaconda/2023b"],
        "signal_seconds": 120,
        "max_requeues": 3,
        "offline": True,
        "staging": True,
        "gpu_limit": 2,
        "checkpoint_write_mb_s": 250,
    },
    "testbed": {
        "description": "local 2-node Slurm testbed (scripts/slurm-testbed up), fake gpu:volta:2 per node",
        "gpu": "V100-32GB",
        "gpus_per_node": 2,
        "gres_type": "volta",
        "gres_style": "typed",
        "partition": "debug",
        "memory_gb": 1,
        "max_time": "00:30:00",
        "cpus_per_gpu": 1,
        "signal_seconds": 30,
        "max_requeues": 2,
    },
}


def config_path() -> Path:
    """Where user profiles live: ``$GPUTRAIN_CONFIG`` or ``$XDG_CONFIG_HOME/gputrain/clusters.yaml``
    (``~/.config/gputrain/clusters.yaml``)."""
    env = os.environ.get("GPUTRAIN_CONFIG")
    if env:
        return Path(env).expanduser()
    from gputrain.home import config_home

    return config_home() / "clusters.yaml"


def _user_profiles() -> dict[str, dict[str, Any]]:
    path = config_path()
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterProfileError(f"{path}: cannot read cluster profiles: {exc}".replace("\n", " ")) from None
    data = safeyaml.load(text, str(path), ClusterProfileError)
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ClusterProfileError(f"{path}: expected a mapping of cluster name -> profile mapping")
    return {str(k): v for k, v in data.items()}


def _build(name: str, raw: dict[str, Any], source: str) -> ClusterProfile:
    try:
        return ClusterProfile(**{**raw, "name": name})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "profile"
        raise ClusterProfileError(f"{source}: cluster {name!r}: {where}: {err['msg']}") from None


def _all_raw() -> dict[str, tuple[dict[str, Any], str]]:
    merged: dict[str, tuple[dict[str, Any], str]] = {k: (v, "built-in") for k, v in BUILTIN_CLUSTERS.items()}
    for name, raw in _user_profiles().items():
        merged[name] = (raw, str(config_path()))
    return merged


def list_clusters() -> list[ClusterProfile]:
    """All known profiles, built-ins first (user file may override them), sorted by name within each."""
    return [_build(name, raw, src) for name, (raw, src) in sorted(_all_raw().items())]


def load_cluster(name: str) -> ClusterProfile:
    """The profile called ``name``; unknown names raise :class:`ClusterProfileError` suggesting the known ones."""
    known = _all_raw()
    if name not in known:
        raise ClusterProfileError(
            unknown_name("cluster", name, sorted(known), hint=f"add your own in {config_path()}")
        )
    raw, src = known[name]
    return _build(name, raw, src)
