"""Rollouts: G sampled completions per prompt, as token tensors with the masks the loss needs.

Two engines fill the same :class:`Rollout`: HF ``generate`` here (works under DDP and FSDP2, see
``sharding.unsharded_for_generation``), and a colocated vLLM engine in ``gputrain.train.grpo.vllm_engine``
whose token lists go through :func:`rollout_from_token_ids`, so both give the same padding and mask semantics
(left-padded prompts, right-padded completions, mask up to and including the first stop token -- any of
the model's EOS ids, ``prompts.stop_token_ids`` --, ``truncated`` when none came). :func:`pick_engine`
chooses; vLLM is never imported here (CPU machines never have it).

HF ``generate`` runs with a neutral generation config: only the recipe's sampling parameters apply.
A checkpoint's ``generation_config.json`` (Qwen2.5-Instruct ships ``repetition_penalty`` 1.05-1.1, top-k
20) would otherwise reshape the sampling distribution away from the tempered softmax the loss computes
log-probs under, biasing every importance ratio.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gputrain.train.grpo.sharding import unsharded_for_generation, unwrap

_NO_VLLM_HINT = "or set algorithm.rollout_engine: hf"


def pick_engine(
    requested: str,
    device: torch.device,
    memory_share: float | None = None,
    *,
    vllm_installed: bool | None = None,
) -> tuple[str, str]:
    """(engine, note for the log): ``hf`` or ``vllm``.

    ``auto`` takes vLLM only when it can work and the plan made room for it: vLLM importable, a CUDA device,
    and ``memory.vllm_gpu_memory_utilization`` set (null means the planner reserved no GPU memory for vLLM,
    so colocating it would break the plan's memory estimate). ``vllm`` asked explicitly and impossible is a
    one-line error, never a silent fall back to HF. ``vllm_installed`` defaults to a ``find_spec`` check.
    """
    from gputrain.errors import GputrainError

    has_vllm = importlib.util.find_spec("vllm") is not None if vllm_installed is None else vllm_installed
    on_cuda = device.type == "cuda"
    if requested == "hf":
        return "hf", "HF generate (rollout_engine: hf)"
    if requested == "vllm":
        reasons = []
        if not has_vllm:
            reasons.append("vLLM is not installed (pip install 'gputrain[gpu]')")
        if not on_cuda:
            reasons.append(f"vLLM needs a CUDA GPU and this rank runs on {device.type}")
        if memory_share is None:
            reasons.append(
                "memory.vllm_gpu_memory_utilization is null (e.g. --set memory.vllm_gpu_memory_utilization=0.3)"
            )
        if reasons:
            raise GputrainError(f"algorithm.rollout_engine=vllm: {'; '.join(reasons)}; {_NO_VLLM_HINT}")
        return "vllm", f"vLLM colocated on each rank, gpu_memory_utilization={memory_share}"
    if not on_cuda:
        return "hf", f"HF generate (auto: no CUDA device, running on {device.type})"
    if not has_vllm:
        return "hf", "HF generate (auto: vLLM not installed; pip install 'gputrain[gpu]' for vLLM rollouts)"
    if memory_share is None:
        return "hf", "HF generate (auto: memory.vllm_gpu_memory_utilization is null, the plan reserves no vLLM memory)"
    return "vllm", f"vLLM colocated on each rank (auto), gpu_memory_utilization={memory_share}"


@dataclass
class Rollout:
    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # [B, C] right-padded after EOS
    completion_mask: torch.Tensor  # 1 up to and including the first EOS
    truncated: torch.Tensor  # [B] bool: no EOS within max_new_tokens
    texts: list[str]
    sampler_logps: torch.Tensor | None = None  # [B, C] the sampler's log-prob per token (vLLM), NaN where none

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


_WARNED_CUT: set[int] = set()


def _warn_if_cut(tokenizer: Any, prompts: list[str], max_len: int, add_special_tokens: bool) -> None:
    """Say once per run when prompts are cut to ``max_prompt_length`` (from the left: the task's start goes
    first, which silently turns a task into another)."""
    if max_len in _WARNED_CUT:
        return
    lengths = [len(ids) for ids in tokenizer(prompts, add_special_tokens=add_special_tokens)["input_ids"]]
    over = sum(n > max_len for n in lengths)
    if over:
        _WARNED_CUT.add(max_len)
        print(f"[grpo] warning: {over} of {len(prompts)} prompts are longer than algorithm.max_prompt_length="
              f"{max_len} tokens (longest {max(lengths)}): their beginnings are cut", file=sys.stderr, flush=True)


def tokenize_prompts(
    tokenizer: Any, prompts: list[str], max_len: int, device: torch.device, add_special_tokens: bool = True,
    *, bucket: bool = False,
) -> Any:
    """Left-padded, left-cut prompt ids and mask: as wide as the longest prompt, or ``max_len`` wide with
    ``bucket`` (the static cache's fixed shape, :func:`generate`)."""
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    _warn_if_cut(tokenizer, prompts, max_len, add_special_tokens)
    enc = tokenizer(prompts, return_tensors="pt", padding="max_length" if bucket else True, truncation=True,
                    max_length=max_len, add_special_tokens=add_special_tokens)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def trim_left_padding(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the leading columns no row uses: a bucket-padded prompt batch back to its longest prompt, the
    width ``padding=True`` gives, so the log-prob and update passes compute on what they did before."""
    width = int(mask.sum(dim=1).max()) if mask.numel() else 0
    start = mask.size(1) - width
    return ids[:, start:], mask[:, start:]


def _ids(eos_ids: int | Sequence[int]) -> list[int]:
    return [int(eos_ids)] if isinstance(eos_ids, int) else [int(i) for i in eos_ids]


def completion_masks(completion_ids: torch.Tensor, eos_ids: int | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask keeping tokens up to and including the first stop token (any of ``eos_ids``), and which rows
    never produced one."""
    stops = torch.tensor(_ids(eos_ids), dtype=completion_ids.dtype, device=completion_ids.device)
    is_eos = torch.isin(completion_ids, stops)
    has_eos = is_eos.any(dim=1)
    first = torch.where(
        has_eos,
        is_eos.int().argmax(dim=1),
        torch.full_like(has_eos, completion_ids.size(1), dtype=torch.long),
    )
    pos = torch.arange(completion_ids.size(1), device=completion_ids.device).expand_as(completion_ids)
    return (pos <= first.unsqueeze(1)).long(), ~has_eos


def rollout_from_token_ids(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    eos_ids: int | Sequence[int],
    pad_id: int,
    decode: Callable[[torch.Tensor], list[str]],
    device: torch.device | None = None,
) -> Rollout:
    """A :class:`Rollout` from unpadded token lists (what vLLM returns), with :func:`generate`'s semantics.

    Prompts are left-padded with ``pad_id``; completions right-padded to the longest one. The mask is
    :func:`completion_masks`' (up to and including the first EOS) restricted to real tokens, so a
    ``pad_id`` equal to an EOS id never counts as an EOS; tokens after the first EOS become ``pad_id``; a
    row with no EOS is ``truncated``. An empty completion counts as an immediate EOS (HF's zero-width case).
    ``decode`` turns the padded completion tensor into texts (``tokenizer.batch_decode`` with
    ``skip_special_tokens=True``, as in :func:`generate`). Pure: no model, no vLLM.
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
    n = len(prompt_ids)
    p_width = max((len(p) for p in prompt_ids), default=0)
    prompts = torch.full((n, p_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, p_width), dtype=torch.long)
    for i, p in enumerate(prompt_ids):
        if len(p):
            prompts[i, p_width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            prompt_mask[i, p_width - len(p) :] = 1
    eos_list = _ids(eos_ids)
    rows = [list(c) if len(c) else [eos_list[0]] for c in completion_ids]
    c_width = max((len(r) for r in rows), default=1)
    comp = torch.full((n, c_width), -1, dtype=torch.long)  # -1: no token here (never equal to an EOS id)
    for i, r in enumerate(rows):
        comp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    real = (comp != -1).long()
    mask, truncated = completion_masks(comp, eos_list)
    mask = mask * real
    comp = comp.masked_fill(mask == 0, pad_id)
    texts = decode(comp)
    if device is not None:
        prompts, prompt_mask, comp, mask, truncated = (
            t.to(device) for t in (prompts, prompt_mask, comp, mask, truncated)
        )
    return Rollout(prompts, prompt_mask, comp, mask, truncated, texts)


def neutral_generation_config(
    *, max_new_tokens: int, temperature: float, top_p: float, top_k: int | None, eos_ids: Sequence[int], pad_id: int,
    cache: str = "dynamic",
) -> Any:
    """A ``GenerationConfig`` holding only the recipe's sampling parameters; everything else at transformers'
    neutral defaults (no repetition penalty, no n-gram ban, no forced or suppressed tokens, no min length).
    ``cache="static"`` sets ``cache_implementation``: the KV cache is allocated at prompt + ``max_new_tokens``
    and, on a GPU, transformers compiles the decode step for that shape (``GenerationMixin.get_compiled_call``)."""
    from transformers import GenerationConfig

    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k or 0)}
        if temperature > 0
        else {"do_sample": False}
    )
    if cache == "static":
        sampling["cache_implementation"] = "static"
    return GenerationConfig(max_new_tokens=int(max_new_tokens), eos_token_id=list(eos_ids), pad_token_id=int(pad_id),
                            use_cache=True, **sampling)


@contextlib.contextmanager
def _neutral_defaults(hf: Any, config: Any) -> Any:
    """transformers 5 fills every unset field of a passed config from ``model.generation_config`` (the
    checkpoint's): swap in the neutral config for the call so there is nothing to inherit."""
    saved = hf.generation_config
    hf.generation_config = config
    try:
        yield
    finally:
        hf.generation_config = saved


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
    eos_ids: Sequence[int] | None = None,
    add_special_tokens: bool = True,
    cache: str = "dynamic",
) -> Rollout:
    """Sample one completion per prompt string (repeat prompts G times before calling for groups).

    ``temperature == 0`` decodes greedily. Generation stops on any of ``eos_ids`` (default: the tokenizer's
    EOS). Works on DDP- and FSDP-wrapped models; under FSDP it is a collective (every rank must call it,
    with any number of prompts) unless ``gather`` is False because the caller already holds
    :func:`unsharded_for_generation`.

    ``cache="static"`` (``algorithm.generate_cache``, ``contract.kernels.resolve_generate_cache``): prompts
    are left-padded to ``max_prompt_length`` so that every call with the same number of prompts has one
    shape (cache ``max_prompt_length + max_new_tokens`` long) and the compiled decode step never recompiles;
    the extra padding is masked (positions come from the mask), then trimmed from the returned prompts, so
    the :class:`Rollout` is the dynamic cache's.
    """
    stops = list(eos_ids) if eos_ids else [int(tokenizer.eos_token_id)]
    static = cache == "static"
    prompt_ids, prompt_mask = tokenize_prompts(tokenizer, prompts, max_prompt_length, device, add_special_tokens,
                                               bucket=static)
    hf = unwrap(model)
    was_training = hf.training
    hf.eval()
    config = neutral_generation_config(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                       top_k=top_k, eos_ids=stops, pad_id=tokenizer.pad_token_id, cache=cache)
    gathered = unsharded_for_generation(model) if gather else contextlib.nullcontext()
    with gathered, autocast or contextlib.nullcontext(), _neutral_defaults(hf, config):
        out = hf.generate(  # type: ignore[operator]
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            generation_config=config,
            # transformers turns synced_gpus on by itself for FSDP-managed models: a rank generating alone
            # (rank-0 evaluation) would then wait forever in an all_reduce. The weights are gathered, so no
            # rank needs the others while generating (tests/integration/test_grpo_code_fsdp.py).
            synced_gpus=False,
        )
    hf.train(was_training)
    completion_ids = out[:, prompt_ids.size(1) :]
    if static:
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids, prompt_mask)
    if completion_ids.size(1) == 0:
        completion_ids = torch.full((len(prompts), 1), stops[0], device=device)
    mask, truncated = completion_masks(completion_ids, stops)
    completion_ids = completion_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Rollout(prompt_ids, prompt_mask, completion_ids, mask, truncated, texts)
