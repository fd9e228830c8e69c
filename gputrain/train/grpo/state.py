"""Whole (unsharded) model and optimizer state for checkpoints, the same under DDP and FSDP2.

Why full state dicts: the runtime's checkpoint keeps rank 0's ``state.pt``; under FSDP each rank holds only
a shard, so the pieces are gathered first (a collective: every rank calls :func:`save_full_state`). A
checkpoint written by FSDP loads into DDP or a single process and back, whatever the world size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def save_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` as plain, unsharded CPU tensors on rank 0 (collective)."""
    return {
        "model": get_model_state_dict(model, options=_FULL),
        "optimizer": get_optimizer_state_dict(model, optimizer, options=_FULL),
    }


def load_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load what :func:`save_full_state` produced (collective); rank 0's dicts are broadcast to the others.

    ``save_full_state`` returns the full dicts on rank 0 only (empty elsewhere), so only rank 0's copy is
    trusted, whichever way the other ranks got theirs.
    """
    import torch.distributed as dist

    many = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    source = state if not many or dist.get_rank() == 0 else {"model": {}, "optimizer": {}}
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=many)
    set_model_state_dict(model, source["model"], options=opts)
    _materialize(optimizer)
    set_optimizer_state_dict(model, optimizer, source["optimizer"], options=opts)


def _materialize(optimizer: torch.optim.Optimizer) -> None:
    """Give a fresh optimizer its state tensors (a step with zero gradients at lr 0 changes no weight).

    torch's full-state loader places the incoming state where the existing state lives; a fresh optimizer
    has none, and resuming happens exactly then.
    """
    if optimizer.state:
        return
    lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    optimizer.step()
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
