"""The backends, as plain data: name → ``"module:Class"``, imported only when a job of that backend is touched.

Like submitit's executor list: ``gputrain jobs/status/cancel/logs`` look up a job's recorded backend here
and call the :class:`~gputrain.backends.base.Backend` methods; none of them names a backend. To add one,
write a ``Backend`` subclass (``submit``, ``status``, ``cancel``; ``submit_all``, ``follow``,
``logs_location``, ``refresh`` and ``list_jobs`` have defaults) and add its row here; ``gputrain submit
--backend NAME`` then submits to it (``tests/unit/test_backend_interface.py`` does that with a toy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NamedTuple

from gputrain.errors import UserError, unknown_name

if TYPE_CHECKING:
    from gputrain.backends.base import Backend
    from gputrain.registry.store import JobRecord, JobRegistry


class BackendSpec(NamedTuple):
    name: str
    target: str
    description: str


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("local", "gputrain.backends.local:LocalBackend", "this machine: torchrun under a supervisor"),
        BackendSpec("slurm", "gputrain.backends.slurm:SlurmBackend", "a Slurm cluster: sbatch, squeue, scancel"),
        BackendSpec("runpod", "gputrain.backends.runpod.backend:RunPodBackend", "a RunPod pod over ssh"),
    )
}


def check_backend_name(name: str) -> str:
    """``name`` if it is a backend; else a one-line UserError with the known names."""
    if name not in BACKENDS:
        raise UserError(unknown_name("backend", name, BACKENDS))
    return name


def load_backend(name: str, registry: JobRegistry | None = None, **settings: Any) -> Backend:
    """The backend called ``name``, sharing ``registry``; ``settings`` are its own keyword options (Slurm's
    sbatch options, RunPod's pod options, local's ``attached``)."""
    module_name, _, class_name = BACKENDS[check_backend_name(name)].target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module_name), class_name)
    return cls(registry, **settings)  # type: ignore[call-arg]  # every backend takes the registry first


def backend_of(record: JobRecord, registry: JobRegistry | None = None) -> Backend:
    """The backend a registry record was submitted to."""
    return load_backend(record.backend, registry)
