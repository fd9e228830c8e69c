"""Choosing the training clip range [β, ω] from held-out data, as the BD3-LM reference does.

Arriola et al. (ICLR 2025, section 4) train on t ~ U[β, ω] with the window that minimises the variance
of the loss estimate. The reference (kuleshov-group/bd3lms) does it this way, and so do we:

* Candidates (``metrics.py: init_valid_vars``): the full range, then for each width ``w`` every window
  ``[i·δ, i·δ + w]`` inside [0, 1] with stride ``δ = clip_search_delta`` (0.05).
* Shared batches (``diffusion.py: validation_step``): every window is scored on the same held-out
  batches. We also give every window the same random numbers (a generator seeded by batch index), so the
  comparison is between windows, not between noise draws, and the search is a function of the weights
  and the seed alone: it never reads the global RNG.
* Per-block variance (``validation_step`` / ``_clipped_schedule_search``): the NELBO terms of a batch
  are averaged per block (over real tokens here: a block of padding has no estimate), the variance is
  taken over all blocks of the batch gathered from every rank, and summed over batches.
* Masks are redrawn inside a window (``objective.draw_masks``, the reference's ``training.resample``), so a
  window is scored as it would be trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

#: (per-token NELBO terms (B, m), real-token mask (B, m)) of shared batch ``i`` for window [lo, hi].
Estimate = Callable[[int, float, float, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def clip_candidates(widths: Sequence[float], delta: float = 0.05) -> list[tuple[float, float]]:
    """The full [0, 1] and the windows ``[i·δ, i·δ + w]`` inside [0, 1] for each width ``w``."""
    if not 0.0 < delta <= 1.0:
        raise ValueError(f"clip search stride must be in (0, 1], got {delta}")
    out: list[tuple[float, float]] = [(0.0, 1.0)]
    for w in widths:
        if not 0.0 < w <= 1.0:
            raise ValueError(f"clip search width must be in (0, 1], got {w}")
        steps = int((1.0 - w) / delta + 1e-9)
        out.extend((round(i * delta, 6), round(min(1.0, i * delta + w), 6)) for i in range(steps + 1))
    return sorted(set(out))


def block_means(per_token: torch.Tensor, real: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Mean NELBO term over the real tokens of each (sequence, block); blocks without one are dropped."""
    k = int(slots.max()) + 1
    slots = slots.to(per_token.device)
    sums = torch.zeros(per_token.shape[0], k, device=per_token.device, dtype=torch.float64)
    counts = torch.zeros_like(sums)
    sums.index_add_(1, slots, (per_token * real).double())
    counts.index_add_(1, slots, real.double())
    keep = counts > 0
    return sums[keep] / counts[keep]


def search_clip(estimate: Estimate, num_batches: int, candidates: Sequence[tuple[float, float]], slots: torch.Tensor,
                seed: int, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
                ) -> tuple[tuple[float, float], dict[str, float]]:
    """The window with the smallest summed per-block variance, and each window's mean variance per batch.

    ``reduce`` sums a tensor over ranks (all ranks then pick the same window). Ties go to the window
    listed first.
    """
    if not candidates:
        raise ValueError("clip search needs at least one candidate window")
    variances: dict[str, float] = {}
    best, best_var = candidates[0], float("inf")
    for lo, hi in candidates:
        total = 0.0
        for i in range(num_batches):
            gen = torch.Generator().manual_seed(seed * 1_000_003 + i)
            per_token, real = estimate(i, lo, hi, gen)
            means = block_means(per_token, real, slots)
            stats = torch.stack([means.sum(), (means * means).sum(), means.new_tensor(float(means.numel()))])
            if reduce is not None:
                stats = reduce(stats)
            n = float(stats[2])
            if n > 1:
                total += float((stats[1] - stats[0] ** 2 / n) / (n - 1))
        variances[f"{lo:g}-{hi:g}"] = total / num_batches
        if total < best_var:
            best, best_var = (lo, hi), total
    return best, variances
