"""Loss terms for training, the held-out NELBO, and the clip search, all counted on real tokens.

``Scorer`` bundles what one NELBO estimate needs (layout, schedule, special ids, attention inputs,
autocast), so training, evaluation and the clip search cannot count tokens differently.

Held-out numbers are comparable across runs and evaluations: batches, t and masks come from a generator
seeded by the run's seed and the rank (the same draws at every evaluation), t is drawn from
[``MIN_T``, 1] — the reference's ``sampling_eps`` to 1, the range of the bound — and the NELBO is divided
by the number of real tokens summed over ranks (``val_nelbo``; ``val_nelbo_padded`` divides by every
position, as this trainer did before, to compare against old figures).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gputrain.train.diffusion.clip_search import search_clip
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token, real_tokens, segment_sums
from gputrain.train.diffusion.schedule import MIN_T, LogLinearSchedule

Reduce = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Scorer:
    layout: Layout
    schedule: LogLinearSchedule
    mask_id: int
    eos_id: int
    inputs: dict[str, torch.Tensor]
    antithetic: bool = True
    count_padding: bool = False
    attn_mask: object = None
    autocast: Callable[[], AbstractContextManager[Any]] | None = None
    loss_kernel: str = "torch"  # "chunked" / "compiled": objective.nelbo_per_token's chunked_ce / compiled_ce

    def terms(self, net: nn.Module, x0: torch.Tensor, lo: float, hi: float,
              generator: torch.Generator | None = None, resample: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position NELBO terms ``(B, m)`` with t ~ U[lo, hi] per block, and which positions count."""
        t = draw_times(x0.shape[0], self.layout, lo, hi, self.antithetic, x0.device, generator=generator)
        with self.autocast() if self.autocast is not None else nullcontext():
            per_tok = nelbo_per_token(net, x0, t, self.layout, self.schedule, self.mask_id, self.inputs,
                                      attn_mask=self.attn_mask, generator=generator,
                                      window=(lo, hi) if resample else None,
                                      chunked_ce=self.loss_kernel == "chunked",
                                      compiled_ce=self.loss_kernel == "compiled")
        real = self.real(x0)
        return per_tok, real

    def real(self, x0: torch.Tensor) -> torch.Tensor:
        if self.count_padding:
            return torch.ones(x0.shape[0], len(self.layout.noisy_pos), dtype=torch.bool, device=x0.device)
        return real_tokens(x0, self.layout, self.eos_id)


def _batches(val_x: torch.Tensor, batch: int, count: int, gen: torch.Generator) -> list[torch.Tensor]:
    return [torch.randint(len(val_x), (batch,), generator=gen) for _ in range(count)]


@torch.no_grad()
def heldout_nelbo(scorer: Scorer, model: nn.Module, val_x: torch.Tensor, batch: int, num_batches: int,
                  seed: int, rank: int = 0, reduce: Reduce | None = None, t_range: tuple[float, float] = (0.0, 1.0)
                  ) -> dict[str, float]:
    """``nelbo`` per real token (and per segment when there are several), ``nelbo_padded`` per position."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed * 7919 + 17 + 1_000_003 * rank)
    device = scorer.inputs["positions"].device
    names = list(scorer.layout.segments)
    sums = torch.zeros(4 + 2 * len(names), dtype=torch.float64)
    for idx in _batches(val_x, batch, num_batches, gen):
        x0 = val_x[idx].to(device)
        per_tok, real = scorer.terms(model, x0, t_range[0], t_range[1], generator=gen)
        seg = segment_sums(per_tok, real, scorer.layout)
        parts = [(per_tok * real).sum(), real.sum(), per_tok.sum(), torch.tensor(per_tok.numel())]
        parts += [v for name in names for v in seg[name]]
        sums += torch.stack([p.double().cpu() for p in parts])
    if reduce is not None:
        sums = reduce(sums.to(device)).cpu()
    model.train(was_training)
    out = {"nelbo": float(sums[0] / sums[1].clamp_min(1)), "nelbo_padded": float(sums[2] / sums[3])}
    if len(names) > 1:
        for i, name in enumerate(names):
            out[f"nelbo_{name}"] = float(sums[4 + 2 * i] / sums[5 + 2 * i].clamp_min(1))
    return out


@torch.no_grad()
def clip_window(scorer: Scorer, model: nn.Module, val_x: torch.Tensor, batch: int, num_batches: int,
                candidates: list[tuple[float, float]], seed: int, rank: int = 0, resample: bool = True,
                reduce: Reduce | None = None) -> tuple[tuple[float, float], dict[str, float]]:
    """The reference's clip search on shared held-out batches (see ``clip_search``)."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed * 7919 + 29 + 1_000_003 * rank)
    device = scorer.inputs["positions"].device
    shared = [val_x[idx].to(device) for idx in _batches(val_x, batch, num_batches, gen)]

    def estimate(i: int, lo: float, hi: float, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return scorer.terms(model, shared[i], lo, hi, generator=g, resample=resample)

    slots = scorer.inputs["cond_idx"][: len(scorer.layout.noisy_pos)]
    best = search_clip(estimate, num_batches, candidates, slots, seed + 1_000_003 * rank, reduce)
    model.train(was_training)
    return best


def validation_t_range() -> tuple[float, float]:
    """The t range of the reported bound: [MIN_T, 1] (t below MIN_T is raised to it when drawn)."""
    return (MIN_T, 1.0)
