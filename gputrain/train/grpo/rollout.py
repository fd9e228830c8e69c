"""Rollouts: G sampled completions per prompt, as token tensors with the masks the loss needs.

Engine: HF ``generate`` (works under DDP and FSDP2, see ``sharding.unsharded_for_generation``). A vLLM
engine is not wired in yet: ``rollout_engine: auto`` therefore means HF everywhere (and says so in the
log when vLLM is installed on a GPU), and ``rollout_engine: vllm`` is refused with a one-line error
instead of silently running HF. vLLM is never imported here.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from typing import Any

import torch

from gputrain.train.grpo.sharding import unsharded_for_generation, unwrap


def pick_engine(requested: str, device: torch.device) -> tuple[str, str]:
    """(engine, note): always ``hf`` for now; ``vllm`` is refused (see the module docstring)."""
    from gputrain.errors import GputrainError

    if requested == "vllm":
        raise GputrainError(
            "algorithm.rollout_engine=vllm: vLLM rollouts are not wired into this build; use hf or auto"
        )
    has_vllm = importlib.util.find_spec("vllm") is not None
    if requested == "auto" and has_vllm and device.type == "cuda":
        return "hf", "vLLM is installed but not wired in yet: rolling out with HF generate"
    return "hf", "HF generate"


@dataclass
class Rollout:
    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # [B, C] right-padded after EOS
    completion_mask: torch.Tensor  # 1 up to and including the first EOS
    truncated: torch.Tensor  # [B] bool: no EOS within max_new_tokens
    texts: list[str]

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def tokenize_prompts(tokenizer: Any, prompts: list[str], max_len: int, device: torch.device) -> Any:
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=max_len)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def completion_masks(completion_ids: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask keeping tokens up to and including the first EOS, and which rows never produced one."""
    is_eos = completion_ids == eos_id
    has_eos = is_eos.any(dim=1)
    first = torch.where(
        has_eos,
        is_eos.int().argmax(dim=1),
        torch.full_like(has_eos, completion_ids.size(1), dtype=torch.long),
    )
    pos = torch.arange(completion_ids.size(1), device=completion_ids.device).expand_as(completion_ids)
    return (pos <= first.unsqueeze(1)).long(), ~has_eos


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: list[str],
    *,
    max_prompt_length: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int | None = None,
    device: torch.device,
    autocast: Any = None,
    gather: bool = True,
) -> Rollout:
    """Sample one completion per prompt string (repeat prompts G times before calling for groups).

    ``temperature == 0`` decodes greedily. Works on DDP- and FSDP-wrapped models; under FSDP it is a
    collective (every rank must call it, with any number of prompts) unless ``gather`` is False because
    the caller already holds :func:`unsharded_for_generation`.
    """
    prompt_ids, prompt_mask = tokenize_prompts(tokenizer, prompts, max_prompt_length, device)
    hf = unwrap(model)
    was_training = hf.training
    hf.eval()
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k or 0}
        if temperature > 0
        else {"do_sample": False}
    )
    gathered = unsharded_for_generation(model) if gather else contextlib.nullcontext()
    with gathered, autocast or contextlib.nullcontext():
        out = hf.generate(  # type: ignore[operator]
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            use_cache=True,
            # transformers turns synced_gpus on by itself for FSDP-managed models: a rank generating alone
            # (rank-0 evaluation) would then wait forever in an all_reduce. The weights are gathered, so no
            # rank needs the others while generating (tests/integration/test_grpo_code_fsdp.py).
            synced_gpus=False,
            **sampling,
        )
    hf.train(was_training)
    completion_ids = out[:, prompt_ids.size(1) :]
    if completion_ids.size(1) == 0:
        completion_ids = torch.full((len(prompts), 1), tokenizer.eos_token_id, device=device)
    mask, truncated = completion_masks(completion_ids, tokenizer.eos_token_id)
    completion_ids = completion_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Rollout(prompt_ids, prompt_mask, completion_ids, mask, truncated, texts)
