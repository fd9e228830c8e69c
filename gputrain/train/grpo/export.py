"""The trained policy as its ecosystem loads it: a ``save_pretrained`` folder (issue 29).

``<job_dir>/model/`` holds ``model.safetensors``, ``config.json``, ``generation_config.json`` and the
tokenizer files with its chat template, so ``AutoModelForCausalLM.from_pretrained(job_dir / "model")`` and
``AutoTokenizer.from_pretrained(...)`` load it as is, with no gputrain installed. Checkpoints (``state.pt``)
stay for resuming; this folder is what leaves the job. A LoRA policy is exported merged (base + adapters,
``lora.save_lora_export``), and its adapters alone go to ``<job_dir>/adapter`` for peft users.

Collective: under FSDP every rank joins the gather of the full weights; rank 0 writes. Written to a temporary
folder and renamed, so a crash never leaves a half-written model where a loader would find it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from gputrain.train.grpo.lora import ADAPTER_DIR, peft_model, save_lora_export
from gputrain.train.grpo.sharding import unwrap

MODEL_DIR = "model"


def export_policy(model: torch.nn.Module, tokenizer: Any, job_dir: Path, *, is_main: bool) -> Path | None:
    """Gather the full weights (every rank calls this) and, on rank 0, write ``job_dir/model``; its path there."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not is_main:
        return None
    final, tmp = job_dir / MODEL_DIR, job_dir / f".{MODEL_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    peft = peft_model(model)
    if peft is not None:  # LoRA: the merged model in model/, the adapters alone in adapter/ (lora.py)
        adapter, adapter_tmp = job_dir / ADAPTER_DIR, job_dir / f".{ADAPTER_DIR}.tmp"
        shutil.rmtree(adapter_tmp, ignore_errors=True)
        save_lora_export({k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, peft, tmp, adapter_tmp)
        tokenizer.save_pretrained(tmp)
        for done, where in ((adapter_tmp, adapter), (tmp, final)):
            shutil.rmtree(where, ignore_errors=True)
            done.rename(where)
        return final
    base: Any = unwrap(model)
    # tied weights: own storage each (a full CPU state dict holds plain tensors only)
    plain = {k: v.detach().clone().contiguous() for k, v in state.items() if isinstance(v, torch.Tensor)}
    if getattr(base.config, "tie_word_embeddings", False):
        plain.pop("lm_head.weight", None)  # the loader re-ties it to the embedding
    base.save_pretrained(tmp, state_dict=plain, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final
