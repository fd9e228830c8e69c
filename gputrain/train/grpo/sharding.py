"""Data parallelism for the policy: DDP, or FSDP2 (torch's ``fully_shard``) that really shards, on CPU too.

Why ``fully_shard`` and not accelerate: accelerate's FSDP plugin silently falls back to DDP on CPU, so a
CPU test of it proves nothing (measured: no DTensor shards). Here every decoder layer and then the root are sharded
over a 1-D device mesh; :func:`sharding_report` checks that parameters really are DTensors whose local
shard is smaller than the whole, and the trainer writes that into the summary (``strategy_in_effect``).

Generation under FSDP: every forward all-gathers parameters, so ranks whose ``generate`` loops run a
different number of steps (one finished early on EOS) would deadlock. :func:`unsharded_for_generation`
gathers the full weights once, switches resharding off, and generation then runs with no collectives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


def hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model: ``model`` itself, or the one inside a peft LoRA policy (``get_base_model``).

    Under LoRA this is the FSDP root, not the ``PeftModel`` around it: ``PeftModel.generate`` calls the inner
    model directly, so a root on the wrapper would be skipped by every rollout (FSDP2 then refuses the next
    forward through the wrapper: "already lazily initialized")."""
    get_base = getattr(model, "get_base_model", None)
    inner = get_base() if callable(get_base) else model
    assert isinstance(inner, torch.nn.Module)
    return inner


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    model = hf_model(model)
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no .model.layers to shard layer by layer")
    return list(layers)


def apply_fsdp(model: torch.nn.Module, device_type: str, *, param_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Shard ``model`` in place over all ranks (full shard); ``param_dtype`` sets compute precision.

    Gradients are reduced in float32 and averaged over ranks, like DDP, so losses mean the same under both.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else None
    kwargs: dict[str, Any] = {"mesh": mesh}
    if mp is not None:
        kwargs["mp_policy"] = mp
    for layer in _decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(hf_model(model), **kwargs)
    return model


def compile_layers(model: torch.nn.Module, device: torch.device) -> str:
    """``torch.compile`` each decoder layer in place (before sharding, as torchtitan does); a note for the log.

    Per layer rather than the whole model: the HF model keeps ``generate`` and its attributes, and FSDP2
    wraps the compiled layers. Skipped where it cannot help (CPU, or no triton).
    """
    if device.type != "cuda":
        return "compile skipped: CPU run"
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return "compile skipped: triton not installed"
    layers = _decoder_layers(model)
    for layer in layers:
        layer.compile()
    return f"compiled {len(layers)} decoder layers"


def apply_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model under a DDP wrapper (FSDP2 shards in place, nothing to unwrap)."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) and not hasattr(model, "generate") else model


@contextmanager
def unsharded_for_generation(model: torch.nn.Module) -> Iterator[None]:
    """Full weights on every rank for the duration, so ``generate`` needs no collectives (see module doc)."""
    from torch.distributed.fsdp import FSDPModule

    fsdp_modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not fsdp_modules:
        yield
        return
    root = hf_model(model)
    for m in fsdp_modules:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in fsdp_modules:
            m.reshard()
            # fully_shard's defaults: the root keeps its weights after forward (backward needs them next).
            m.set_reshard_after_forward(m is not root, recurse=False)


@dataclass
class ShardingReport:
    strategy: str
    dtensor_params: int
    total_params: int
    local_numel: int
    global_numel: int

    @property
    def sharded(self) -> bool:
        return self.dtensor_params == self.total_params > 0 and self.local_numel < self.global_numel


def sharding_report(model: torch.nn.Module, strategy: str) -> ShardingReport:
    """How much of the model this rank actually holds; the evidence that FSDP is in effect."""
    from torch.distributed.tensor import DTensor

    dtensors = local = total = 0
    params = list(model.parameters())
    for p in params:
        if isinstance(p, DTensor):
            dtensors += 1
            local += p.to_local().numel()
        else:
            local += p.numel()
        total += p.numel()
    return ShardingReport(strategy, dtensors, len(params), local, total)
