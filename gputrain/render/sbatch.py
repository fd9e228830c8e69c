"""The Slurm job script: a pure function of the plan and explicit inputs, like submitit's ``_make_sbatch_string``.

``render_sbatch(plan, SbatchInputs(...))`` reads nothing else: not the working directory, not the clock, not
the environment, not ``sys.executable``. The same plan and inputs give the same text, which is what the
golden files in ``tests/unit/data/slurm/`` hold (regenerate them with
``GPUTRAIN_UPDATE_GOLDEN=1 pytest tests/unit/test_slurm_sbatch.py`` and review the diff). The values that do
depend on the moment and the machine are gathered by the caller, in one place: :meth:`SbatchInputs.here`.

Layout (:func:`sbatch_layout`, cluster profile × plan): one task per GPU (SuperCloud's habit) with
``cpus_per_gpu`` CPUs each, one torchrun per node, no GRES for a ``cpu`` plan, the recipe's time capped by
the profile's. ``#SBATCH`` lines are parsed by sbatch, not a shell, so they carry only plain words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gputrain import __version__
from gputrain.contract import jobstate
from gputrain.contract.cluster import WORD_RE, ClusterProfile
from gputrain.errors import ClusterProfileError, RenderError
from gputrain.render.node_env import node_environment, preemption_seconds, python_command, staged_repos
from gputrain.render.render import render_template, template_context

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

REQUEUE_EXIT_CODE = jobstate.REQUEUE_EXIT_CODE
"""The training's "checkpointed, run me again" exit code (the job-folder contract; train/ is an island)."""


@dataclass(frozen=True)
class SbatchInputs:
    """Everything the job script depends on besides the plan.

    ``logs_dir``: where job folders go (absolute: the script runs with ``--chdir``); ``workdir``: the job's
    working directory; ``stamp``: the submission time in the folder name (``gputrain submit`` passes a
    placeholder and stamps the text at submission); ``python``: the interpreter that runs torchrun and the
    closing summary on the nodes; ``debug``: NCCL / torch.distributed debug logging; ``version``: the
    gputrain version named in the header; ``hf_home``: the Hugging Face cache the job reads when the plan
    pins none (:mod:`gputrain.render.node_env`).
    """

    logs_dir: str
    workdir: str
    stamp: str
    python: str
    debug: bool = False
    version: str = __version__
    hf_home: str | None = None

    @classmethod
    def here(cls, plan: JobPlan, *, logs_dir: str = "logs", stamp: str | None = None,
             debug: bool = False) -> SbatchInputs:
        """Inputs for submitting from this process: its working directory, the current time, the
        interpreter (this one, by absolute path, unless the profile names one) and the HF cache."""
        import os
        import sys
        import time

        return cls(
            logs_dir=logs_dir, workdir=os.getcwd(), stamp=stamp or time.strftime("%Y%m%d_%H%M%S"),
            python=default_python(plan.cluster, sys.executable), debug=debug,
            hf_home=default_hf_home(plan.cluster, os.environ),
        )


def default_python(cluster: ClusterProfile | None, current: str) -> str:
    """The profile's ``python`` if it names one, else ``current``: the interpreter of the environment that
    runs ``gputrain submit``, where gputrain and its training extras are installed (by absolute path, valid
    on a shared filesystem). A site's set-up lines (``module load anaconda``) no longer decide it."""
    return cluster.python if cluster is not None and cluster.python else current


def default_hf_home(cluster: ClusterProfile | None, environ: Mapping[str, str]) -> str:
    """The profile's ``cache_dir`` (``~`` and ``$VARS`` expanded here, on the submitting machine), else
    ``$HF_HOME``, else ``~/.cache/huggingface``, as ``huggingface_hub`` itself defaults."""
    import os

    raw = (cluster.cache_dir if cluster is not None else None) or environ.get("HF_HOME") \
        or os.path.join(environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return os.path.abspath(os.path.expanduser(os.path.expandvars(raw)))


def _seconds(hms: str) -> int:
    days, _, rest = hms.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def _directive(what: str, value: Any) -> str:
    """#SBATCH lines are parsed by sbatch, not a shell: only plain words can be carried safely."""
    text = str(value)
    if not WORD_RE.match(text):
        raise ClusterProfileError(f"{what} {text!r} has characters an #SBATCH line cannot carry (spaces, quotes...)")
    return text


def sbatch_layout(plan: JobPlan, inputs: SbatchInputs) -> dict[str, Any]:
    """What ``templates/sbatch.j2`` sees as ``slurm``: the job's shape on the plan's cluster."""
    profile = plan.cluster or ClusterProfile(name="default")
    res = plan.recipe.resources
    gpus, nodes = plan.gpus_per_node, plan.nodes
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
        "signal_seconds": preemption_seconds(plan),
        "max_requeues": profile.max_requeues,
        "requeue_exit_code": REQUEUE_EXIT_CODE,
        "preempted_marker": jobstate.PREEMPTED_MARKER,
        "cancelled_marker": jobstate.CANCELLED_MARKER,
        "logs_dir": _directive("logs dir", inputs.logs_dir),
        "workdir": _directive("working dir", inputs.workdir),
        "stamp": _directive("stamp", inputs.stamp),
        "python": python_command(plan.cluster, inputs.python),  # words: a container runs it with --nv
        "node_env": node_environment(plan, inputs.hf_home),
        "staged_repos": staged_repos(plan),
        "omp_threads": int(cpus),
        "debug": inputs.debug,
    }


def render_sbatch(plan: JobPlan, inputs: SbatchInputs) -> str:
    """The job script ``gputrain submit`` sends for ``plan`` (``plan --cluster`` shows the same text)."""
    if plan.cluster is None:
        raise RenderError("the slurm target needs a cluster profile: pass --cluster NAME")
    context = template_context(plan)
    context["version"] = inputs.version
    context["slurm"] = sbatch_layout(plan, inputs)
    return render_template("sbatch.j2", context)
