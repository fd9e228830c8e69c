"""Per-token log-probs and the clipped GRPO objective with a k3 KL penalty.

Definitions match TRL 1.16's ``GRPOTrainer._compute_loss`` (token-level importance sampling); the unit test
``tests/unit/test_grpo_loss_vs_trl.py`` runs both on identical inputs. For one completion token t:

    ratio  = exp(logp − logp_old)
    pg     = −min(ratio·A, clip(ratio, 1 − ε_low, 1 + ε_high)·A)
    kl     = exp(logp_ref − logp) − (logp_ref − logp) − 1          (k3, Schulman's unbiased, ≥ 0 estimator)
    kl     = kl · ratio          when ``kl_ratio_correction`` (TRL 1.16's default ``use_bias_correction_kl``:
                                 the samples come from the old policy, the ratio makes the estimate unbiased)
    token  = pg + β·kl

With vLLM rollouts the policy-gradient term is multiplied by a truncated importance weight per token,
``min(exp(logp_old − logp_vllm), C)`` (TRL 1.16's ``token_truncate`` IS correction, C = 3 by default): vLLM's
kernels sample from a slightly different distribution than the training forward computes, and without
the correction that gap biases the gradient. With ``entropy_coeff`` > 0 (verl's ``entropy_coeff``, TRL's
``entropy_coef``) the loss subtracts ``entropy_coeff`` × the mean per-token entropy of the micro-batch,
divided by ``accum_steps`` (the same for every loss type).

and the micro-batch loss aggregates ``token`` over the completion mask by ``loss_type``:

- ``grpo``: mean over each sequence's tokens, then mean over sequences, divided by ``accum_steps``;
- ``bnpo``: mean over the micro-batch's tokens, divided by ``accum_steps``;
- ``dr_grpo``: sum / (sequences × max_completion_length), divided by ``accum_steps``;
- ``dapo``: sum / ``tokens_per_rank``, where the caller passes the update's token count summed over
  every micro-batch and rank, divided by the world size (gradients are averaged over ranks afterwards,
  so the result is a token mean over the whole update).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., index]`` one row at a time, so the [B, T, V] float32 copy never exists."""
    rows = [
        torch.gather(F.log_softmax(row.float(), dim=-1), -1, idx.unsqueeze(-1)).squeeze(-1)
        for row, idx in zip(logits, index, strict=True)
    ]
    return torch.stack(rows)


def logprobs_and_entropy(logits: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``log_softmax(logits)[..., index]``, entropy of each position's distribution), one row at a time."""
    logps, entropies = [], []
    for row, idx in zip(logits, index, strict=True):
        logp = F.log_softmax(row.float(), dim=-1)
        logps.append(torch.gather(logp, -1, idx.unsqueeze(-1)).squeeze(-1))
        entropies.append(-(logp.exp() * logp).sum(-1))
    return torch.stack(logps), torch.stack(entropies)


def truncated_is_weights(
    old_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor, cap: float = 3.0
) -> torch.Tensor:
    """Per-token ``min(exp(old − sampler), cap)`` on the mask (1 elsewhere and where the sampler gave NaN)."""
    diff = torch.nan_to_num((old_logps.float() - sampler_logps.float()) * mask.float(), nan=0.0)
    return torch.clamp(torch.exp(diff), max=cap)


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Log-probs ``[B, logits_to_keep]`` of the last ``logits_to_keep`` tokens of ``input_ids``.

    Logits are divided by the sampling temperature, so the log-probs are those of the distribution the
    completions were drawn from (TRL does the same). ``chunk_size`` bounds the rows per forward pass.
    """
    size = chunk_size or input_ids.size(0)
    out = []
    for start in range(0, input_ids.size(0), size):
        ids = input_ids[start : start + size]
        logits = model(input_ids=ids, attention_mask=attention_mask[start : start + size]).logits
        logits = logits[:, -logits_to_keep - 1 : -1, :] / temperature
        out.append(selective_log_softmax(logits, ids[:, -logits_to_keep:]))
    return torch.cat(out, dim=0)


def completion_logprobs_and_entropy(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`completion_logprobs` of one micro-batch plus the per-token entropy of the tempered distribution."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits[:, -logits_to_keep - 1 : -1, :] / temperature
    return logprobs_and_entropy(logits, input_ids[:, -logits_to_keep:])


@dataclass
class LossOutput:
    loss: torch.Tensor
    """The scalar to call ``backward`` on (already divided for gradient accumulation)."""
    kl: float
    """Mean k3 KL over completion tokens (0.0 when β = 0)."""
    clip_ratio: float
    """Share of completion tokens whose ratio was clipped in the direction that stops the gradient."""
    tokens: int
    entropy: float = 0.0
    """Mean per-token entropy over completion tokens (0.0 when no entropies were given)."""


def grpo_loss(
    logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    old_logps: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    loss_type: str = "dapo",
    beta: float = 0.0,
    kl_ratio_correction: bool = True,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    max_completion_length: int | None = None,
    accum_steps: int = 1,
    tokens_per_rank: float | None = None,
    is_weights: torch.Tensor | None = None,
    entropies: torch.Tensor | None = None,
    entropy_coeff: float = 0.0,
) -> LossOutput:
    """The micro-batch loss; see the module docstring for the exact definition.

    ``old_logps`` None means the completions were sampled from the current weights (one update per
    rollout): the ratio is then exp(logp − logp.detach()) = 1 with the right gradient.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    mask = mask.to(logps.dtype)
    adv = advantages.to(logps.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if is_weights is not None:
        per_token = per_token * is_weights.to(per_token.dtype)
    kl_value = 0.0
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs the reference log-probs")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        if kl_ratio_correction:
            kl = kl * ratio
        per_token = per_token + beta * kl
        kl_value = float(((kl * mask).sum() / mask.sum().clamp(min=1.0)).detach())

    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accum_steps
    elif loss_type == "bnpo":
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0) / accum_steps
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type dr_grpo needs max_completion_length")
        loss = (per_token * mask).sum() / (per_token.size(0) * max_completion_length) / accum_steps
    else:
        denom = float(mask.sum()) if tokens_per_rank is None else tokens_per_rank
        loss = (per_token * mask).sum() / max(denom, 1.0)

    entropy_value = 0.0
    if entropies is not None:
        mean_entropy = (entropies * mask).sum() / mask.sum().clamp(min=1.0)
        entropy_value = float(mean_entropy.detach())
        if entropy_coeff:
            loss = loss - entropy_coeff * mean_entropy / accum_steps

    with torch.no_grad():
        region = ((ratio < 1 - epsilon_low) & (adv < 0)) | ((ratio > 1 + epsilon_high) & (adv > 0))
        clip_ratio = float((region.to(mask.dtype) * mask).sum() / mask.sum().clamp(min=1.0))
    return LossOutput(loss=loss, kl=kl_value, clip_ratio=clip_ratio, tokens=int(mask.sum()), entropy=entropy_value)
