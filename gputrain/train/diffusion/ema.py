"""An exponential moving average of the weights, used for every evaluation and for sampling.

The reference keeps one with decay 0.9999 (kuleshov-group/bd3lms ``configs/config.yaml: training.ema``,
``models/ema.py``), updates it after every optimizer step, and swaps it in for validation, the clip search
and sampling (``diffusion.py: on_validation_epoch_start``, ``restore_model_and_sample``). Its decay ramps
up as ``min(decay, (1 + n) / (10 + n))`` after n updates, so a short run averages over its last ~n/9 steps
rather than over its random initialisation; we keep that ramp.

torch's ``AveragedModel`` holds the copy and the update count (both land in checkpoints through its
``state_dict``); only the decay rule is ours.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

ParamList = tuple[torch.Tensor, ...] | list[torch.Tensor]


def ema_decay(decay: float, updates: int) -> float:
    """The reference's warm-up: ``min(decay, (1 + n) / (10 + n))`` at the n-th update (n ≥ 1)."""
    return min(decay, (1 + updates) / (10 + updates))


def make_ema(model: nn.Module, decay: float) -> AveragedModel | None:
    """An averaged copy of ``model`` (None when ``decay`` is 0: evaluate the raw weights)."""
    if decay <= 0:
        return None

    @torch.no_grad()
    def update(averaged: ParamList, current: ParamList, num_averaged: torch.Tensor | int) -> None:
        # AveragedModel copies the weights at its first update; this is the reference's update number n + 1
        weight = 1.0 - ema_decay(decay, int(num_averaged) + 1)
        torch._foreach_lerp_(list(averaged), list(current), weight)

    ema = AveragedModel(model, multi_avg_fn=update, use_buffers=False)
    ema.requires_grad_(False)
    return ema


def eval_model(model: nn.Module, ema: AveragedModel | None) -> nn.Module:
    """The module to evaluate and sample with: the average when there is one."""
    if ema is None:
        return model
    inner = ema.module
    assert isinstance(inner, nn.Module)
    return inner
