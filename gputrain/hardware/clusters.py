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
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gputrain import safeyaml
from gputrain.errors import ClusterProfileError, unknown_name

GresStyle = Literal["typed", "plain", "gpus-per-node"]
# Validating patterns are anchored with \A...\Z: Python's ``$`` also matches before a trailing newline.
_TIME_RE = re.compile(r"\A(\d+-)?\d{1,3}:\d{2}:\d{2}\Z")
_WORD_RE = re.compile(r"\A[A-Za-z0-9_@%+=:,./-]+\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class ClusterProfile(BaseModel):
    """One Slurm site. Values are rendered shell-quoted into ``#SBATCH`` lines; nothing here is a secret."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    gpu: str | None = Field(None, description="canonical catalog GPU name, e.g. V100-32GB")
    gpus_per_node: int = Field(1, ge=0)
    gres_type: str | None = None
    gres_style: GresStyle = "typed"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    memory_gb: int | None = Field(None, ge=1)
    max_time: str | None = "12:00:00"
    cpus_per_gpu: int | None = Field(None, ge=1)
    setup: list[str] = Field(default_factory=list)
    sbatch_extra: list[str] = Field(default_factory=list)
    signal_seconds: int = Field(120, ge=0)
    max_requeues: int = Field(3, ge=0)

    @field_validator("max_time")
    @classmethod
    def _check_time(cls, value: str | None) -> str | None:
        if value is not None and not _TIME_RE.match(value):
            raise ValueError(f"max_time {value!r} is not HH:MM:SS (or D-HH:MM:SS)")
        return value

    @field_validator("name", "gpu", "gres_type", "partition", "account", "qos", "constraint")
    @classmethod
    def _plain_word(cls, value: str | None) -> str | None:
        """These end up in ``#SBATCH`` lines, which sbatch (not a shell) parses: plain words only."""
        if value is not None and not _WORD_RE.match(value):
            raise ValueError(f"{value!r} may only hold letters, digits and _@%+=:,./- (no spaces, quotes or "
                             "line breaks)")
        return value

    @field_validator("description", "setup", "sbatch_extra")
    @classmethod
    def _single_lines(cls, value: str | list[str]) -> str | list[str]:
        for line in [value] if isinstance(value, str) else value:
            found = _CONTROL_RE.search(line)
            if found:
                raise ValueError(f"{line[:60]!r} holds the control character {found.group()!r}; use one line per "
                                 "entry")
        return value

    def gres_option(self, gpus: int) -> str | None:
        """The sbatch option asking for ``gpus`` GPUs per node in this site's spelling (None: no GPUs)."""
        if gpus <= 0:
            return None
        if self.gres_style == "gpus-per-node":
            kind = f"{self.gres_type}:" if self.gres_type else ""
            return f"--gpus-per-node={kind}{gpus}"
        if self.gres_style == "typed" and self.gres_type:
            return f"--gres=gpu:{self.gres_type}:{gpus}"
        return f"--gres=gpu:{gpus}"


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


_SAFE_RE = _WORD_RE
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
    cluster: dict[str, Any] | None,
    plan: dict[str, Any],
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

    profile = ClusterProfile.model_validate(cluster or {"name": "default"})
    config = plan["config"]
    res = config.get("resources", {})
    gpus = int(plan["gpus_per_node"])
    nodes = int(plan["nodes"])
    time = res.get("time") or profile.max_time or "12:00:00"
    if profile.max_time and _seconds(time) > _seconds(profile.max_time):
        time = profile.max_time
    cpus = profile.cpus_per_gpu or res.get("cpus_per_gpu") or 1
    gres = None if plan["gpu"] == "cpu" else profile.gres_option(gpus)
    site = [
        f"--{opt}={_directive(opt, getattr(profile, opt))}"
        for opt in ("partition", "account", "qos", "constraint")
        if getattr(profile, opt)
    ]
    return {
        "cluster_name": profile.name,
        "job_name": _directive("recipe name", plan["recipe"]),
        "nodes": nodes,
        "gpus_per_node": gpus,
        "ntasks_per_node": max(gpus, 1),
        "cpus_per_task": int(cpus),
        "gres_option": gres,
        "memory_gb": res.get("memory_gb") or profile.memory_gb,
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
