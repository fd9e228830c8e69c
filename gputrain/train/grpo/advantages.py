"""Group-relative advantages: the one place GRPO and GDPO turn rewards into advantages.

Why one function: the code, math and GDPO trainings must agree on what an advantage is, and the tests pin
that definition with hand-computed cases and against TRL 1.16 on identical inputs.

Layout of ``rewards``: ``[B, K]`` (B rollouts, K reward components), rows grouped contiguously, i.e. rows
``g*G .. g*G+G-1`` are the G completions of prompt g. The tensor must be the *global* batch: call
:func:`gather_rewards` first under ``torch.distributed`` (GDPO's whole-batch step and
``scale_rewards="batch"`` need every rank's rows), then :func:`local_rows` to keep this rank's advantages.

Two aggregations:

- ``sum_then_normalize`` (GRPO): ``r = Σ_k w_k r_k``; ``A = (r − mean_g r) / (std + eps)`` where std is the
  group's (``scale_rewards="group"``), the whole batch's (``"batch"``) or no scaling at all (``"none"``).
- ``normalize_then_sum`` (GDPO, arXiv 2601.05242): per component
  ``A_k = (r_k − mean_g r_k) / (std_g r_k + eps)``, ``s = Σ_k w_k A_k``, then
  ``A = (s − mean_batch s) / (std_batch s + eps)``. ``scale_rewards`` does not apply.

Standard deviations use Bessel's correction and ``eps`` defaults to 1e-4, as TRL does. NaN rewards mean
"this reward function did not score this row": means and stds skip them; a row whose every component is NaN
gets advantage 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

Aggregation = Literal["sum_then_normalize", "normalize_then_sum"]
ScaleRewards = Literal["group", "batch", "none"]
AGGREGATIONS: tuple[str, ...] = ("sum_then_normalize", "normalize_then_sum")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")


def _nan_std(x: torch.Tensor, dim: int | None, unbiased: bool) -> torch.Tensor:
    """Std ignoring NaNs; 0 where fewer than two values (a single sample has no spread to divide by)."""
    valid = ~torch.isnan(x)
    n = valid.sum(dim=dim, keepdim=True) if dim is not None else valid.sum()
    mean = torch.nanmean(x, dim=dim, keepdim=True) if dim is not None else torch.nanmean(x)
    sq = torch.where(valid, (x - mean) ** 2, torch.zeros_like(x))
    ss = sq.sum(dim=dim, keepdim=True) if dim is not None else sq.sum()
    denom = (n - 1) if unbiased else n
    var = torch.where(n > 1, ss / denom.clamp(min=1), torch.zeros_like(ss))
    return var.sqrt()


def compute_advantages(
    rewards: torch.Tensor,
    group_size: int,
    weights: Sequence[float] | torch.Tensor | None = None,
    *,
    aggregation: str = "sum_then_normalize",
    scale_rewards: str = "group",
    eps: float = 1e-4,
    unbiased: bool = True,
) -> torch.Tensor:
    """Advantages ``[B]`` for the global batch of rewards ``[B, K]`` (or ``[B]``, one component).

    ``group_size`` G must divide B. ``weights`` (length K, default all 1) weight the components.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    r = rewards.detach().to(torch.float32)
    if r.dim() == 1:
        r = r.unsqueeze(1)
    if r.dim() != 2:
        raise ValueError(f"rewards must have shape [B, K], got {tuple(rewards.shape)}")
    b, k = r.shape
    if group_size < 1 or b % group_size != 0:
        raise ValueError(f"batch of {b} rollouts is not a whole number of groups of {group_size}")
    w = torch.ones(k) if weights is None else torch.as_tensor(weights, dtype=torch.float32).flatten()
    if w.numel() != k:
        raise ValueError(f"{w.numel()} reward weights for {k} reward components")
    w = w.to(r.device)
    unscorable = torch.isnan(r).all(dim=1)
    grouped = r.view(b // group_size, group_size, k)

    if aggregation == "sum_then_normalize":
        total = (torch.nan_to_num(r, nan=0.0) * w).sum(dim=1)
        total = torch.where(unscorable, torch.full_like(total, float("nan")), total)
        g = total.view(-1, group_size)
        centred = (g - torch.nanmean(g, dim=1, keepdim=True)).flatten()
        if scale_rewards == "group":
            std = _nan_std(g, dim=1, unbiased=unbiased).expand_as(g).flatten()
            adv = centred / (std + eps)
        elif scale_rewards == "batch":
            adv = centred / (_nan_std(total, dim=None, unbiased=unbiased) + eps)
        else:
            adv = centred
    else:
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = _nan_std(grouped, dim=1, unbiased=unbiased)
        per_k = ((grouped - mean_k) / (std_k + eps)).view(b, k)
        summed = (torch.nan_to_num(per_k, nan=0.0) * w).sum(dim=1)
        summed = torch.where(unscorable, torch.full_like(summed, float("nan")), summed)
        adv = (summed - torch.nanmean(summed)) / (_nan_std(summed, dim=None, unbiased=unbiased) + eps)
    return torch.nan_to_num(adv, nan=0.0)


def count_distinct_advantages(advantages: torch.Tensor, group_size: int | None = None, decimals: int = 3) -> int:
    """Number of distinct advantage values (rounded), a measure of how finely the signal separates rollouts.

    With ``group_size`` the count is per group and summed, so identical groups in different prompts count
    once each (GDPO's claim is about resolution inside a group, not duplicates across prompts).
    """
    # Rounding absorbs the eps-sized differences (0.5/(0.7071+eps) vs 1/(1.4142+eps)); + 0.0 folds -0.0.
    a = torch.round(advantages.detach().to(torch.float64).flatten() * 10**decimals) + 0.0
    if group_size is None:
        return int(torch.unique(a).numel())
    return sum(int(torch.unique(row).numel()) for row in a.view(-1, group_size))


def gather_rewards(local: torch.Tensor) -> torch.Tensor:
    """All ranks' reward rows in rank order (``[B_local, K]`` → ``[world·B_local, K]``).

    Without an initialised process group (or with one rank) this returns ``local`` unchanged.

    Every rank must hold the same number of rows. Gathering before normalising is what makes the batch
    statistics of ``scale_rewards="batch"`` and GDPO global rather than per rank.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local.contiguous())
    return torch.cat(parts, dim=0)


def local_rows(global_values: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's slice of a tensor built from :func:`gather_rewards` output."""
    n = global_values.shape[0] // world_size
    return global_values[rank * n : (rank + 1) * n]
