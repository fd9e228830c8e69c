"""The command that reruns a failed job with its remedy applied, resuming from its newest checkpoint.

Built from the job's own plan (recipe file, GPU type, GPUs, nodes, cluster, preset, the ``--set`` overrides it
was planned with) plus the remedy's overrides, which win because they come last. Every word is shell-quoted:
a recipe path or an override value with a space or a quote stays one word when pasted into a shell.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from gputrain.doctor.remedy import Remedy, original_overrides

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan


def rerun_command(plan: JobPlan, remedy: Remedy | None, job_ref: str) -> str:
    """``gputrain run|submit …`` for ``plan`` with ``remedy`` applied, resuming from job ``job_ref``."""
    slurm = plan.target == "slurm" and plan.cluster is not None
    words = ["gputrain", "submit" if slurm else "run", plan.recipe_path]
    if slurm and plan.cluster is not None:
        words += ["--cluster", plan.cluster.name]
    words += ["--gpu", plan.gpu.name, "--gpus", str(plan.gpus_per_node)]
    if slurm:
        words += ["--nodes", str(plan.nodes)]
    if plan.preset:
        words += ["--preset", plan.preset]
    remedy_keys = {o.partition("=")[0] for o in (remedy.overrides if remedy else [])}
    for override in original_overrides(plan):
        if override.partition("=")[0] not in remedy_keys:
            words += ["--set", override]
    for override in remedy.overrides if remedy else []:
        words += ["--set", override]
    flags = list(remedy.flags) if remedy else []
    if "--debug" in flags and not slurm:  # `run` has no --debug: the same variables, set for the command
        flags.remove("--debug")
        words = ["env", "NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL", *words]
    words += flags
    if remedy is None or remedy.resume:
        words += ["--resume-from", job_ref]
    return shlex.join(words)
