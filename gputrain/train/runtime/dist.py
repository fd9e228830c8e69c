"""Process-group set-up from the launcher's environment (torchrun, or srun without torchrun).

torchrun exports RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT. A bare ``srun python -m ...`` only
exports SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; those are mapped onto the torchrun names, and then
MASTER_ADDR/MASTER_PORT must come from the job script (Slurm node names do not always resolve, e.g. the
``n1``/``n2`` of a one-host testbed). A single process without any of these runs with ``world_size == 1`` and
no process group, so every collective helper here is a no-op in that case.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gputrain.errors import GputrainError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str | None  # None when no process group was created (world_size == 1)
    device: torch.device


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise GputrainError(f"environment variable {name}={raw!r} is not an integer") from exc


def _adopt_slurm_env() -> None:
    """Map srun's variables onto torchrun's when the job was started by srun directly."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    ntasks = _env_int("SLURM_NTASKS", 1)
    if ntasks <= 1:
        return
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = str(ntasks)
    os.environ.setdefault("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise GputrainError(
            "started by srun with SLURM_NTASKS>1 but MASTER_ADDR/MASTER_PORT are not set; "
            "export them in the job script or launch with torchrun"
        )


def init_distributed(backend: str = "auto") -> DistInfo:
    """Create the process group (gloo on CPU, nccl on GPU) and pick this rank's device.

    ``backend`` is the recipe's ``distributed.backend``: auto | nccl | gloo.
    """
    _adopt_slurm_env()
    rank = _env_int("RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    cuda = torch.cuda.is_available()
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise GputrainError("distributed.backend is nccl but no CUDA device is visible; use gloo on CPU")
    if backend not in ("nccl", "gloo"):
        raise GputrainError(f"distributed.backend {backend!r} is not one of auto, nccl, gloo")
    if cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size <= 1:
        return DistInfo(rank=0, world_size=1, local_rank=0, backend=None, device=device)
    if not dist.is_initialized():
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, **kwargs)  # type: ignore[arg-type]
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend, device=device)


def is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    if is_dist():
        dist.barrier()


def max_int(value: int, device: torch.device) -> int:
    """The largest of the ranks' values, on every rank (a MAX all-reduce)."""
    return int(_max(value, torch.int64, device))


def max_float(value: float, device: torch.device) -> float:
    """:func:`max_int` for a float (a step waits for its slowest rank: compile seconds, peaks)."""
    return float(_max(value, torch.float64, device))


def _max(value: float, dtype: torch.dtype, device: torch.device) -> float:
    if not is_dist():
        return value
    t = torch.tensor([value], dtype=dtype, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def all_reduce_mean(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Average scalar metrics over ranks (every rank must call it with the same keys)."""
    if not is_dist() or not values:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    t /= dist.get_world_size()
    return {k: float(v) for k, v in zip(keys, t.tolist(), strict=True)}


def shutdown() -> None:
    """Barrier, then destroy: without the barrier gloo runs sometimes abort at exit (2 of 7 runs, SIGABRT)."""
    if is_dist():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
