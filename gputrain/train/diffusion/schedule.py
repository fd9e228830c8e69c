"""Log-linear masking schedule and the per-block timestep sampler.

Masked diffusion with ``α_t = 1 − (1 − ε)·t`` (the "log-linear" schedule of MDLM/BD3-LM): a token is
[MASK]ed at time t with probability ``1 − α_t``. The continuous-time NELBO weighs the cross-entropy of a
masked token by ``−α'_t / (1 − α_t)``, which for this schedule is exactly ``1/t``; that weight is why a
model that knows nothing scores ``ln V`` per token at any t.

BD3-LM draws one t per block, stratified ("antithetic") over all blocks of the batch, and may clip t to
``[β, ω]`` during training: the estimator stays the same shape but its variance drops. The clip range
can be chosen from data (``clip_search``), as in the bd3lms reference.
"""

from __future__ import annotations

import torch

#: Lowest t ever drawn (the reference's ``training.sampling_eps``): the 1/t weight stays finite.
MIN_T = 1e-3


class LogLinearSchedule:
    """``α_t = 1 − (1 − ε) t``; ``ε`` keeps a sliver of tokens clean at t = 1."""

    def __init__(self, eps: float = 1e-3) -> None:
        if not 0.0 <= eps < 1.0:
            raise ValueError(f"noise eps must be in [0, 1), got {eps}")
        self.eps = eps

    def alpha(self, t: torch.Tensor) -> torch.Tensor:
        return 1.0 - (1.0 - self.eps) * t

    def mask_prob(self, t: torch.Tensor) -> torch.Tensor:
        return 1.0 - self.alpha(t)

    def loss_weight(self, t: torch.Tensor) -> torch.Tensor:
        """``−α'_t / (1 − α_t)``: the NELBO weight of a masked token's cross-entropy (= 1/t here)."""
        return (1.0 - self.eps) / self.mask_prob(t).clamp_min(1e-12)


def sample_block_times(
    batch: int,
    num_blocks: int,
    *,
    low: float = 0.0,
    high: float = 1.0,
    antithetic: bool = True,
    min_t: float = MIN_T,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """One t per (sequence, block) in ``[low, high]``, shape ``(batch, num_blocks)``.

    Antithetic (stratified) sampling puts exactly one draw in each of the ``batch·num_blocks`` equal strata
    of [0, 1), so every batch covers the whole range of noise levels.
    """
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(f"clip range must satisfy 0 <= beta < omega <= 1, got [{low}, {high}]")
    count = batch * num_blocks
    u = torch.rand(count, generator=generator)
    if antithetic:
        u = (u / count + torch.arange(count) / count) % 1.0
        u = u[torch.randperm(count, generator=generator)]
    t = low + (high - low) * u
    return t.clamp_min(min_t).view(batch, num_blocks).to(device)
