"""What a cluster profile adds to a job's environment on the nodes: offline caches, interpreter, staging.

Pure functions of the plan and the sbatch inputs (:mod:`gputrain.render.sbatch` calls them):

- :func:`node_environment`: ``HF_HOME`` (the cache ``gputrain prepare`` filled) and, on a site whose nodes
  have no internet (``offline: true``), ``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``,
  ``TRANSFORMERS_OFFLINE=1`` and ``WANDB_MODE=offline``: a job never waits on a connection that cannot
  exist, and fails at once naming a missing file instead.
- :func:`python_command`: the interpreter the nodes run (the submitting environment's by absolute path, the
  profile's ``python``, or the profile's ``container`` through ``apptainer exec --nv``).
- :func:`staged_repos`: the hub cache folders copied to node-local ``$TMPDIR`` when the profile asks.
- :func:`preemption_seconds`: the warning before a preemption, long enough to write the plan's checkpoint.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gputrain.contract.cluster import ClusterProfile

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

OFFLINE_ENV = (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
               ("WANDB_MODE", "offline"), ("HF_HUB_DISABLE_TELEMETRY", "1"))
#: Bytes per parameter a checkpoint holds: fp32 weights (4) and Adam's two moments (8).
CHECKPOINT_BYTES_PER_PARAM = 12
#: Seconds for the running step to end and the processes to exit, besides writing the checkpoint.
PREEMPTION_MARGIN_S = 60


def cache_dir_of(plan: JobPlan, default: str | None) -> str | None:
    """The HF_HOME a job reads: the one its pinned assets were checked in, else the caller's default."""
    if plan.offline is not None:
        return plan.offline.cache_dir
    return default


def node_environment(plan: JobPlan, hf_home: str | None) -> list[tuple[str, str]]:
    """``(name, value)`` pairs exported before the training starts."""
    profile = plan.cluster or ClusterProfile(name="default")
    env: list[tuple[str, str]] = []
    home = cache_dir_of(plan, hf_home)
    if home and (profile.offline or profile.cache_dir or plan.offline is not None):
        env.append(("HF_HOME", home))
    if profile.offline:
        env.extend(OFFLINE_ENV)
    return env


def python_command(profile: ClusterProfile | None, python: str) -> list[str]:
    """The words that start the interpreter on a node: ``python`` itself, or a container running it.

    ``python`` is the caller's choice (the profile's ``python`` or the submitting interpreter); inside a
    container the profile's ``python`` or ``python3`` on the image's PATH.
    """
    if profile is None or not profile.container:
        return [profile.python if profile is not None and profile.python else python]
    return [profile.container_runtime, "exec", "--nv", profile.container, profile.python or "python3"]


def staged_repos(plan: JobPlan) -> list[str]:
    """Hub cache folders (relative to ``$HF_HOME/hub``) to copy to node-local disk, when the profile stages."""
    if plan.cluster is None or not plan.cluster.staging or plan.offline is None:
        return []
    return [f"{p.item.kind}s--{p.item.repo.replace('/', '--')}" for p in plan.offline.repos]


def checkpoint_bytes(plan: JobPlan) -> int:
    """What one checkpoint of this plan writes: fp32 weights plus Adam's moments (0 when params unknown)."""
    params = plan.estimate.params or plan.recipe.model.params or 0
    return int(params * CHECKPOINT_BYTES_PER_PARAM)


def preemption_seconds(plan: JobPlan) -> int:
    """The profile's ``signal_seconds``, raised so the checkpoint is written in time at the filesystem's
    speed (``checkpoint_write_mb_s``) with a factor 2 of safety, in whole 10 s."""
    profile = plan.cluster or ClusterProfile(name="default")
    floor = profile.signal_seconds
    if not floor or not profile.checkpoint_write_mb_s:
        return floor
    write_s = checkpoint_bytes(plan) / (profile.checkpoint_write_mb_s * 1e6)
    needed = PREEMPTION_MARGIN_S + 2 * write_s
    return max(floor, math.ceil(needed / 10.0) * 10)
