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
    """``{"model": ..., "optimizer": ...}`` as plain, unsharded CPU tensors (collective)."""
    return {
        "model": get_model_state_dict(model, options=_FULL),
        "optimizer": get_optimizer_state_dict(model, optimizer, options=_FULL),
    }


def load_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load what :func:`save_full_state` produced; every rank passes the same full dicts."""
    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, state["model"], options=opts)
    set_optimizer_state_dict(model, optimizer, state["optimizer"], options=opts)
