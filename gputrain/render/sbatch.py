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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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


MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
              "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_BEGIN_RE = re.compile(r"\A(now(\+[0-9]{1,6}(seconds|minutes|hours|days|weeks)?)?|"
                       r"[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2})?)?|[0-9]{2}:[0-9]{2}(:[0-9]{2})?|"
                       r"midnight|noon|teatime|today|tomorrow)\Z")
_MAIL_RE = re.compile(r"\A[A-Za-z0-9_.+-]{1,64}(@[A-Za-z0-9.-]{1,190})?\Z")
_JOB_ID_RE = re.compile(r"\A[0-9]{1,12}(_[0-9]{1,8})?\Z")


@dataclass(frozen=True)
class SubmitOptions:
    """Per-submit sbatch options (``gputrain submit --account ... --after 4242``), over the cluster profile's.

    Validated here, where they become ``#SBATCH`` words: no ``%`` (sbatch expands it in some options), no
    spaces, quotes or control characters; each a one-line error naming the option (exit 2).
    """

    account: str | None = None
    qos: str | None = None
    partition: str | None = None
    reservation: str | None = None
    exclusive: bool = False
    mail_type: tuple[str, ...] = ()
    mail_user: str | None = None
    begin: str | None = None
    after: tuple[str, ...] = ()
    after_ok: tuple[str, ...] = ()
    signal: str | None = None

    def __post_init__(self) -> None:
        for opt in ("account", "qos", "partition", "reservation"):
            value = getattr(self, opt)
            if value is not None and not _NAME_RE.match(value):
                _bad(opt, value, "letters, digits and _.- (starting with a letter or digit)")
        for kind in self.mail_type:
            if kind.upper() not in MAIL_TYPES:
                _bad("mail-type", kind, "one of " + ", ".join(MAIL_TYPES))
        if self.mail_user is not None and not _MAIL_RE.match(self.mail_user):
            _bad("mail-user", self.mail_user, "an address like user@example.org")
        if self.begin is not None and not _BEGIN_RE.match(self.begin):
            _bad("begin", self.begin, "now+1hours, 2026-01-31T08:00, 16:00, tomorrow...")
        for opt, ids in (("after", self.after), ("after-ok", self.after_ok)):
            for job in ids:
                if not _JOB_ID_RE.match(job):
                    _bad(opt, job, "a Slurm job id such as 4242 or 4242_3")
        if self.signal is not None and self.signal not in ("USR1", "USR2"):
            _bad("signal", self.signal, "USR1 or USR2")

    def directives(self) -> list[str]:
        """The ``#SBATCH`` words these options add (partition/account/qos replace the profile's)."""
        out = [f"--{opt}={getattr(self, opt)}" for opt in ("reservation",) if getattr(self, opt)]
        if self.exclusive:
            out.append("--exclusive")
        if self.mail_type:
            out.append("--mail-type=" + ",".join(k.upper() for k in self.mail_type))
        if self.mail_user:
            out.append(f"--mail-user={self.mail_user}")
        if self.begin:
            out.append(f"--begin={self.begin}")
        deps = [f"afterany:{':'.join(self.after)}"] if self.after else []
        deps += [f"afterok:{':'.join(self.after_ok)}"] if self.after_ok else []
        if deps:
            out.append("--dependency=" + ",".join(deps))
        return out


def _bad(option: str, value: str, expected: str) -> None:
    from gputrain.errors import UserError

    raise UserError(f"--{option} {value[:60]!r}: expected {expected}")


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
    options: SubmitOptions = field(default_factory=lambda: SubmitOptions())
    array: tuple[int, int | None] | None = None  # a --sweep as one array: (points, at most this many at once)
    job_dir: str | None = None  # a fixed job folder (a dry run's, for a plain `sbatch`); None: named by the job id
    hf_home: str | None = None

    @classmethod
    def here(cls, plan: JobPlan, *, logs_dir: str = "logs", stamp: str | None = None,
             debug: bool = False, options: SubmitOptions | None = None) -> SbatchInputs:
        """Inputs for submitting from this process: its working directory, the current time, the
        interpreter (this one, by absolute path, unless the profile names one) and the HF cache."""
        import os
        import sys
        import time

        return cls(
            logs_dir=logs_dir, workdir=os.getcwd(), stamp=stamp or time.strftime("%Y%m%d_%H%M%S"),
            python=default_python(plan.cluster, sys.executable), debug=debug,
            options=options or SubmitOptions(),
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


def time_seconds(hms: str) -> int:
    """A Slurm time limit (``[D-]HH:MM:SS``) in seconds."""
    days, _, rest = hms.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def _directive(what: str, value: Any, *, path: bool = False) -> str:
    """#SBATCH lines are parsed by sbatch, not a shell: only plain words can be carried safely. In a path
    (``--output``, ``--chdir``) sbatch also expands ``%j``/``%u``...: a ``%`` there is refused too."""
    text = str(value)
    if not WORD_RE.match(text):
        raise ClusterProfileError(f"{what} {text!r} has characters an #SBATCH line cannot carry (spaces, quotes...)")
    if path and "%" in text:
        raise ClusterProfileError(f"{what} {text!r} holds '%', which sbatch would expand (%j, %u...); "
                                  "use a path without it")
    return text


def sbatch_layout(plan: JobPlan, inputs: SbatchInputs) -> dict[str, Any]:
    """What ``templates/sbatch.j2`` sees as ``slurm``: the job's shape on the plan's cluster."""
    profile = plan.cluster or ClusterProfile(name="default")
    gpus, nodes = plan.gpus_per_node, plan.nodes
    shape = job_shape(plan)
    time, cpus, memory = shape["time"], shape["cpus_per_gpu"], shape["memory_gb"]
    gres = None if plan.gpu.is_cpu else profile.gres_option(gpus)
    opts = inputs.options
    site = [
        f"--{opt}={_directive(opt, getattr(opts, opt, None) or getattr(profile, opt))}"
        for opt in ("partition", "account", "qos", "constraint")
        if getattr(opts, opt, None) or getattr(profile, opt)
    ]
    signal = opts.signal or profile.signal
    return {
        "cluster_name": profile.name,
        "job_name": _directive("recipe name", plan.recipe.name, path=True),
        "nodes": nodes,
        "gpus_per_node": gpus,
        "ntasks_per_node": max(gpus, 1),
        "cpus_per_task": int(cpus),
        "gres_option": gres,
        "memory_gb": memory,
        "time": _directive("time", time),
        "time_seconds": time_seconds(time),
        "site_options": site,
        "submit_options": opts.directives(),
        "array": _array(inputs.array),
        "sbatch_extra": list(profile.sbatch_extra),
        "setup": list(profile.setup),
        "signal_seconds": preemption_seconds(plan),
        "signal": signal,
        "srun_wait": max(60, preemption_seconds(plan)),
        "max_requeues": profile.max_requeues,
        "max_timeout_requeues": profile.max_timeout_requeues,
        "stop_request_file": jobstate.STOP_REQUEST_FILE,
        "timeout_marker": jobstate.TIMEOUT_MARKER,
        "requeue_exit_code": REQUEUE_EXIT_CODE,
        "preempted_marker": jobstate.PREEMPTED_MARKER,
        "cancelled_marker": jobstate.CANCELLED_MARKER,
        "logs_dir": _directive("logs dir", inputs.logs_dir, path=True),
        "workdir": _directive("working dir", inputs.workdir, path=True),
        "stamp": _directive("stamp", inputs.stamp, path=True),
        "job_dir": _directive("job dir", inputs.job_dir, path=True) if inputs.job_dir else None,
        "python": python_command(plan.cluster, inputs.python),  # words: a container runs it with --nv
        "node_env": node_environment(plan, inputs.hf_home),
        "staged_repos": staged_repos(plan),
        "checkpoint_stage": bool(profile.staging),
        "omp_threads": int(cpus),
        "debug": inputs.debug,
    }


def _array(spec: tuple[int, int | None] | None) -> str | None:
    """``--array=0-N`` (``%P``: at most P tasks at once, Slurm's throttle)."""
    if spec is None:
        return None
    count, parallel = spec
    return f"0-{count - 1}" + (f"%{parallel}" if parallel else "")


def job_shape(plan: JobPlan) -> dict[str, Any]:
    """Time, CPUs per GPU and memory for ``plan`` on its cluster, one rule for every field: **the recipe
    asks, the cluster profile caps**. The profile's ``max_time``, ``cpus_per_gpu`` and ``memory_gb`` are the
    most a job may ask there; a recipe value over one is lowered to it (:func:`shape_warnings` says so), and
    a value the recipe leaves unset (``memory_gb``) is the profile's."""
    return {key: value for key, (value, _) in _shape(plan).items()}


def shape_warnings(plan: JobPlan) -> list[str]:
    """One line per recipe value the cluster profile capped (``submit`` prints them on stderr)."""
    name = plan.cluster.name if plan.cluster else "default"
    return [f"resources.{key} {asked} is over the maximum of cluster {name} ({value}): the job asks for {value}"
            for key, (value, asked) in _shape(plan).items() if asked is not None]


def _shape(plan: JobPlan) -> dict[str, tuple[Any, Any]]:
    """field → (value used, the recipe's value when it was capped, else None)."""
    profile = plan.cluster or ClusterProfile(name="default")
    res = plan.recipe.resources
    out: dict[str, tuple[Any, Any]] = {}
    capped = profile.max_time and time_seconds(res.time) > time_seconds(profile.max_time)
    out["time"] = (profile.max_time, res.time) if capped else (res.time, None)
    for name in ("cpus_per_gpu", "memory_gb"):
        asked, most = getattr(res, name), getattr(profile, name)
        if asked is None:
            out[name] = (most, None)
        elif most is not None and asked > most:
            out[name] = (most, asked)
        else:
            out[name] = (asked, None)
    return out


def render_sbatch(plan: JobPlan, inputs: SbatchInputs) -> str:
    """The job script ``gputrain submit`` sends for ``plan`` (``plan --cluster`` shows the same text)."""
    if plan.cluster is None:
        raise RenderError("the slurm target needs a cluster profile: pass --cluster NAME")
    context = template_context(plan)
    context["version"] = inputs.version
    context["slurm"] = sbatch_layout(plan, inputs)
    return render_template("sbatch.j2", context)
