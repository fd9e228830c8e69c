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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gputrain import safeyaml
from gputrain.contract.cluster import WORD_RE, ClusterProfile, GresStyle
from gputrain.errors import ClusterProfileError, unknown_name

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

__all__ = ["BUILTIN_CLUSTERS", "ClusterProfile", "GresStyle", "config_path", "list_clusters", "load_cluster"]


BUILTIN_CLUSTERS: dict[str, dict[str, Any]] = {
    "supercloud": {
        "description": "MIT SuperCloud: Xeon nodes with 2x V100-32GB each (gpu:volta:2)",
        "gpu": "V100-32GB",
        "gpus_per_node": 2,
        "gres_type": "volta",
        "gres_style": "typed",
        "memory_gb": 64,
        "max_time": "12:00:00",
        "cpus_per_gpu": 20,
        "setup": ["source /etc/profile", "module load anaconda/2023b"],
        "signal_seconds": 120,
        "max_requeues": 3,
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
    """Where user profiles live: ``$GPUTRAIN_CONFIG`` or ``~/.config/gputrain/clusters.yaml``."""
    env = os.environ.get("GPUTRAIN_CONFIG")
    if env:
        return Path(env).expanduser()
    return Path("~/.config/gputrain/clusters.yaml").expanduser()


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


_SAFE_RE = WORD_RE
REQUEUE_EXIT_CODE = 75  # same value as gputrain.train.runtime.signals.REQUEUE_EXIT_CODE (train/ is an island)


def _seconds(hms: str) -> int:
    days, _, rest = hms.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def _directive(what: str, value: Any) -> str:
    """#SBATCH lines are parsed by sbatch, not a shell: only plain words can be carried safely."""
    text = str(value)
    if not _SAFE_RE.match(text):
        raise ClusterProfileError(f"{what} {text!r} has characters an #SBATCH line cannot carry (spaces, quotes...)")
    return text


def sbatch_settings(
    plan: JobPlan,
    *,
    logs_dir: str = "logs",
    stamp: str | None = None,
    workdir: str = ".",
    python: str | None = None,
    debug: bool = False,
) -> dict[str, Any]:
    """Everything ``templates/sbatch.j2`` needs besides the plan: cluster profile × plan → job layout.

    One task per GPU (SuperCloud's habit), ``cpus_per_gpu`` CPUs each; the launcher step then runs one
    torchrun per node. A ``cpu`` plan asks for no GRES. The recipe's time is capped by the profile's.
    """
    import sys
    from datetime import datetime

    profile = plan.cluster or ClusterProfile(name="default")
    res = plan.recipe.resources
    gpus = plan.gpus_per_node
    nodes = plan.nodes
    time = res.time
    if profile.max_time and _seconds(time) > _seconds(profile.max_time):
        time = profile.max_time
    cpus = profile.cpus_per_gpu or res.cpus_per_gpu
    gres = None if plan.gpu.is_cpu else profile.gres_option(gpus)
    site = [
        f"--{opt}={_directive(opt, getattr(profile, opt))}"
        for opt in ("partition", "account", "qos", "constraint")
        if getattr(profile, opt)
    ]
    return {
        "cluster_name": profile.name,
        "job_name": _directive("recipe name", plan.recipe.name),
        "nodes": nodes,
        "gpus_per_node": gpus,
        "ntasks_per_node": max(gpus, 1),
        "cpus_per_task": int(cpus),
        "gres_option": gres,
        "memory_gb": res.memory_gb or profile.memory_gb,
        "time": _directive("time", time),
        "site_options": site,
        "sbatch_extra": list(profile.sbatch_extra),
        "setup": list(profile.setup),
        "signal_seconds": profile.signal_seconds,
        "max_requeues": profile.max_requeues,
        "requeue_exit_code": REQUEUE_EXIT_CODE,
        "logs_dir": _directive("logs dir", logs_dir),
        "workdir": _directive("working dir", workdir),
        "stamp": stamp or datetime.now().strftime("%Y%m%d_%H%M%S"),
        "python": python or ("python" if profile.setup else sys.executable),
        "omp_threads": int(cpus),
        "debug": debug,
    }
