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

Statistics are float64 and a group without spread gives exactly 0, not rounding noise: in float32 the
mean of eight 0.7s is not 0.7, ``(x − mean)/(0 + eps)`` turns that into ±1e-3, and GDPO's batch z-score of
a batch of such groups divides it by its own tiny std, inflating it to advantages of order 1 (up to ±0.87
seen) for rollouts that earned exactly the same as their siblings. So a component with no spread in a group
contributes 0 to that group, and a group with no spread in any component gets 0 after the batch step too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

Aggregation = Literal["sum_then_normalize", "normalize_then_sum"]
ScaleRewards = Literal["group", "batch", "none"]
AGGREGATIONS: tuple[str, ...] = ("sum_then_normalize", "normalize_then_sum")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")


def _zero_spread(grouped: torch.Tensor) -> torch.Tensor:
    """True per group (dim 1) where every scored value is the same (or fewer than two are scored)."""
    valid = ~torch.isnan(grouped)
    hi = torch.where(valid, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    lo = torch.where(valid, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    return (hi <= lo) | (valid.sum(dim=1) < 2)


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
    r = rewards.detach().to(torch.float64)
    if r.dim() == 1:
        r = r.unsqueeze(1)
    if r.dim() != 2:
        raise ValueError(f"rewards must have shape [B, K], got {tuple(rewards.shape)}")
    b, k = r.shape
    if group_size < 1 or b % group_size != 0:
        raise ValueError(f"batch of {b} rollouts is not a whole number of groups of {group_size}")
    w = torch.ones(k, dtype=torch.float64) if weights is None else torch.as_tensor(weights, dtype=torch.float64)
    w = w.flatten()
    if w.numel() != k:
        raise ValueError(f"{w.numel()} reward weights for {k} reward components")
    w = w.to(r.device)
    unscorable = torch.isnan(r).all(dim=1)
    grouped = r.view(b // group_size, group_size, k)

    if aggregation == "sum_then_normalize":
        total = (torch.nan_to_num(r, nan=0.0) * w).sum(dim=1)
        total = torch.where(unscorable, torch.full_like(total, float("nan")), total)
        g = total.view(-1, group_size)
        flat = _zero_spread(g).unsqueeze(1).expand_as(g).flatten()
        centred = (g - torch.nanmean(g, dim=1, keepdim=True)).flatten()
        centred = torch.where(flat, torch.zeros_like(centred), centred)
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
        flat_k = _zero_spread(grouped).unsqueeze(1)  # [groups, 1, K]
        per_k = torch.where(flat_k, torch.zeros_like(grouped), (grouped - mean_k) / (std_k + eps))
        per_k = torch.where(torch.isnan(grouped), grouped, per_k).view(b, k)
        summed = (torch.nan_to_num(per_k, nan=0.0) * w).sum(dim=1)
        summed = torch.where(unscorable, torch.full_like(summed, float("nan")), summed)
        adv = (summed - torch.nanmean(summed)) / (_nan_std(summed, dim=None, unbiased=unbiased) + eps)
        flat = flat_k.squeeze(1).all(dim=1).unsqueeze(1).expand(-1, group_size).flatten()
        adv = torch.where(flat, torch.zeros_like(adv), adv)
    return torch.nan_to_num(adv, nan=0.0).to(torch.float32)


def reward_statistics(
    rewards: torch.Tensor, group_size: int, weights: Sequence[float], advantages: torch.Tensor, names: Sequence[str]
) -> dict[str, float]:
    """Per-step statistics of the global batch (float64, unscored values skipped), under TRL's metric names.

    ``reward``/``reward_std``: the weighted sum over the rows with at least one scored component (a NaN
    component counts 0 in the sum, as in the advantages; a row with none is left out). Per component:
    ``rewards/<name>/mean``, ``/std`` and ``/frac_zero_std`` (groups where it has no spread).
    ``frac_reward_zero_std``: groups whose summed reward has no spread (no learning signal from them).
    ``advantages/mean`` and ``/std`` of the scored rows.
    """
    r = rewards.detach().to(torch.float64).cpu()
    if r.dim() == 1:
        r = r.unsqueeze(1)
    scored = ~torch.isnan(r).all(dim=1)
    w = torch.as_tensor(list(weights), dtype=torch.float64)
    total = (torch.nan_to_num(r, nan=0.0) * w).sum(dim=1)
    out: dict[str, float] = {}

    def mean_std(x: torch.Tensor) -> tuple[float, float]:
        x = x[~torch.isnan(x)]
        if not x.numel():
            return 0.0, 0.0
        return float(x.mean()), float(x.std()) if x.numel() > 1 else 0.0

    out["reward"], out["reward_std"] = mean_std(torch.where(scored, total, torch.full_like(total, torch.nan)))
    masked_total = torch.where(scored, total, torch.full_like(total, torch.nan))
    out["frac_reward_zero_std"] = float(_zero_spread(masked_total.view(-1, group_size)).double().mean())
    for k, name in enumerate(names):
        column = r[:, k]
        out[f"rewards/{name}/mean"], out[f"rewards/{name}/std"] = mean_std(column)
        out[f"rewards/{name}/frac_zero_std"] = float(_zero_spread(column.view(-1, group_size)).double().mean())
    adv = advantages.detach().to(torch.float64).cpu().flatten()
    out["advantages/mean"], out["advantages/std"] = mean_std(torch.where(scored, adv, torch.full_like(adv, torch.nan)))
    return out


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
