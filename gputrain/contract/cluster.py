"""A Slurm site as a plan records it: partition, GRES spelling, limits, set-up lines.

Where profiles come from (built-ins, ``~/.config/gputrain/clusters.yaml``) is
``gputrain.hardware.clusters``; this module is only the model, so a plan can carry one without YAML.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GresStyle = Literal["typed", "plain", "gpus-per-node"]
StopSignal = Literal["USR1", "USR2"]
# Validating patterns are anchored with \A...\Z: Python's ``$`` also matches before a trailing newline.
_TIME_RE = re.compile(r"\A(\d+-)?\d{1,3}:\d{2}:\d{2}\Z")
#: A value sbatch reads from an ``#SBATCH`` line (no shell parses it): plain words only.
WORD_RE = re.compile(r"\A[A-Za-z0-9_@%+=:,./-]+\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class ClusterProfile(BaseModel):
    """One Slurm site. Values are rendered into ``#SBATCH`` lines (checked there); nothing here is a secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    gpu: str | None = Field(default=None, description="canonical catalog GPU name, e.g. V100-32GB")
    gpus_per_node: int = Field(default=1, ge=0)
    gres_type: str | None = None
    gres_style: GresStyle = "typed"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    memory_gb: int | None = Field(default=None, ge=1)
    max_time: str | None = "12:00:00"
    cpus_per_gpu: int | None = Field(default=None, ge=1)
    setup: list[str] = Field(default_factory=list)
    sbatch_extra: list[str] = Field(default_factory=list)
    signal_seconds: int = Field(default=120, ge=0)
    signal: StopSignal = Field(default="USR1", description="what Slurm sends signal_seconds before the time "
                               "limit (--signal=B:SIG@N); USR2 when the user's code uses USR1")
    max_requeues: int = Field(default=3, ge=0, description="requeues after a preemption")
    max_timeout_requeues: int = Field(default=0, ge=0, description="requeues after the time limit (0: the job "
                                      "ends TIMEOUT, checkpointed)")

    # -- sites whose compute nodes have no internet (SuperCloud): see gputrain.offline ------------------
    offline: bool = Field(default=False, description="compute nodes have no internet: jobs read only the cache "
                          "`gputrain prepare` filled (HF_*_OFFLINE=1, WANDB_MODE=offline) and submit checks it")
    cache_dir: str | None = Field(default=None, description="HF_HOME on the shared filesystem for prepared "
                                  "models and datasets (default: $HF_HOME or ~/.cache/huggingface)")
    python: str | None = Field(default=None, description="interpreter on the nodes (default: the one that "
                               "runs `gputrain submit`, by absolute path)")
    container: str | None = Field(default=None, description="Apptainer/Singularity image the training runs in "
                                  "(with --nv)")
    container_runtime: Literal["apptainer", "singularity"] = "apptainer"
    staging: bool = Field(default=False, description="copy the job's prepared hub repositories to node-local "
                          "$TMPDIR before training, and write checkpoints there first (copied into the job "
                          "folder in the background)")
    gpu_limit: int | None = Field(default=None, ge=1, description="GPUs one user may hold at once (warn above)")
    checkpoint_write_mb_s: float | None = Field(default=None, gt=0, description="checkpoint write speed of the "
                                                "shared filesystem: sizes the preemption window")

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
        if value is not None and not WORD_RE.match(value):
            raise ValueError(f"{value!r} may only hold letters, digits and _@%+=:,./- (no spaces, quotes or "
                             "line breaks)")
        return value

    @field_validator("cache_dir", "python", "container")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        """Paths reach the job script shell-quoted; a control character could still end a line."""
        if value is not None and (not value.strip() or _CONTROL_RE.search(value)):
            raise ValueError(f"{value!r} is not a usable path (empty, or holds a control character)")
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
