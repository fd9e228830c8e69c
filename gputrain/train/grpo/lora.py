"""LoRA for the RL trainings (issue 29), the way TRL users know it: ``GRPOTrainer(peft_config=LoraConfig(...))``.

Recipe: ``model.lora_rank`` (TRL's ``ModelConfig.lora_r``), ``model.lora_alpha`` (32), ``model.lora_dropout``
(0.05), ``model.lora_target_modules`` (unset: peft's default for the architecture) — TRL's ``ModelConfig``
defaults. As in TRL:

* the policy is ``peft.get_peft_model(model, LoraConfig(...))``: the base weights are frozen
  (``requires_grad=False``) and the optimizer gets only the adapters (the trainer passes the parameters
  that require gradients);
* the KL reference is the *same* model with its adapters switched off (``PeftModel.disable_adapter``, TRL's
  ``use_adapter(model, None)``), not a second copy of the weights: :class:`AdapterOffReference`. At step 0
  the adapters' B matrices are zero, so policy and reference agree exactly, as with a copied reference;
* the export (``export.export_policy``) ships the **merged** model (``merge_and_unload``: base + B·A·α/r in
  every targeted weight), which ``AutoModelForCausalLM.from_pretrained`` loads with no peft installed, and
  the adapters alone in ``<job_dir>/adapter`` (``PeftModel.from_pretrained(base, job_dir / "adapter")``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gputrain.errors import GputrainError
from gputrain.recipe.schema import ModelSpec

ADAPTER_DIR = "adapter"


def lora_config(spec: ModelSpec) -> Any | None:
    """The ``peft.LoraConfig`` the recipe asks for, or None without ``model.lora_rank``."""
    if spec.lora_rank is None:
        return None
    try:
        from peft import LoraConfig
    except ImportError:
        raise GputrainError("model.lora_rank: LoRA needs the peft library (pip install 'gputrain[train]')") from None

    return LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                      target_modules=list(spec.lora_target_modules) if spec.lora_target_modules else None,
                      bias="none", task_type="CAUSAL_LM")


def apply_lora(model: Any, spec: ModelSpec) -> Any:
    """``model`` with adapters (a ``PeftModel``; base weights frozen), or ``model`` itself without LoRA."""
    config = lora_config(spec)
    if config is None:
        return model
    from peft import get_peft_model

    return get_peft_model(model, config)


def lora_report(model: torch.nn.Module, spec: ModelSpec) -> dict[str, Any] | None:
    """What ``result.json`` says about LoRA (None without it); counted before any sharding."""
    if spec.lora_rank is None:
        return None
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    peft = peft_model(model)
    targets = sorted(peft.peft_config["default"].target_modules) if peft is not None else None
    return {"rank": spec.lora_rank, "alpha": spec.lora_alpha, "dropout": spec.lora_dropout,
            "target_modules": targets, "trainable_params": trainable, "frozen_params": total - trainable,
            "reference": "the base model (adapters disabled)",
            "export": f"merged in model/, adapters in {ADAPTER_DIR}/"}


def peft_model(model: torch.nn.Module) -> Any | None:
    """The ``PeftModel`` inside a DDP wrapper (or ``model`` itself), None when the policy has no adapters."""
    from peft import PeftModel

    for candidate in (model, getattr(model, "module", None)):
        if isinstance(candidate, PeftModel):
            return candidate
    return None


class AdapterOffReference(torch.nn.Module):
    """The frozen reference of a LoRA policy: the policy's forward with its adapters disabled.

    Holds the policy outside the module tree (a tuple, not a submodule), so it adds no parameters, no copy
    and no state-dict entries; only its forward is used (``loss.completion_logprobs``), under ``no_grad``.
    """

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self._policy = (policy,)
        peft = peft_model(policy)
        if peft is None:
            raise ValueError("AdapterOffReference needs a policy with LoRA adapters")
        self._peft = (peft,)

    def forward(self, **inputs: Any) -> Any:
        with self._peft[0].disable_adapter():
            return self._policy[0](**inputs)


def save_lora_export(full_state: dict[str, torch.Tensor], peft: Any, model_dir: Path, adapter_dir: Path) -> None:
    """Write the merged model to ``model_dir`` and the adapters alone to ``adapter_dir`` (rank 0, CPU).

    The live policy may be sharded (FSDP2) or wrapped; a fresh copy of the architecture, built on the meta
    device (no second allocation, no random init) and filled by assignment from the gathered state, saves
    its adapters (``PeftModel.save_pretrained``) and is then merged by peft itself (``merge_and_unload``),
    so the merged weights are exactly what peft's LoRA layers compute.
    """
    import copy

    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    live = peft.get_base_model()
    lora = copy.deepcopy(peft.peft_config["default"])
    with torch.device("meta"):
        fresh = get_peft_model(AutoModelForCausalLM.from_config(copy.deepcopy(live.config), dtype=torch.float32),
                               lora)
    fresh.load_state_dict(full_state, strict=False, assign=True)
    missing = [name for name, p in fresh.named_parameters() if p.is_meta]
    if missing:
        raise RuntimeError(f"LoRA export: {len(missing)} weights missing from the gathered state, e.g. {missing[0]}")
    live_buffers = dict(peft.named_buffers())  # non-persistent (rotary tables): not in any state dict
    for prefix, module in fresh.named_modules():
        for name, buf in list(module.named_buffers(recurse=False)):
            if buf.is_meta:
                source = live_buffers[f"{prefix}.{name}" if prefix else name]
                module.register_buffer(name, source.detach().to("cpu").clone(), persistent=False)
    base = fresh.get_base_model()
    base.generation_config = copy.deepcopy(live.generation_config)
    if getattr(base.config, "tie_word_embeddings", False):
        base.tie_weights()  # assignment gave the head its own tensor: share it with the embedding again
    fresh.save_pretrained(adapter_dir)
    merged = fresh.merge_and_unload()
    merged.save_pretrained(model_dir, safe_serialization=True)
