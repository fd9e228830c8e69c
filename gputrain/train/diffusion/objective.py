"""The block-diffusion NELBO under the SUBS parameterisation, and the clip-range search.

A ``Layout`` says which positions are diffused and which block each position belongs to, so the same
code trains BD3-LM (every position diffused, blocks of L') and HDP (a clean question block, then plan and
execution blocks). One forward pass sees ``x_t ⊕ x_0``; logits are read on the ``x_t`` half only.

SUBS (Sahoo et al., MDLM): the model never predicts [MASK] (its logit is −∞) and an unmasked token is
copied, so only masked positions contribute, each with ``−log p(x_0)`` weighted by ``−α'_t/(1−α_t)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gputrain.train.diffusion.masks import bd3_block_ids, block_diffusion_mask
from gputrain.train.diffusion.schedule import LogLinearSchedule, sample_block_times


@dataclass
class Layout:
    """Which positions are noised (``noisy_pos``), block ids of all positions, named loss segments."""

    block_ids: torch.Tensor
    noisy_pos: torch.Tensor
    segments: dict[str, torch.Tensor]

    @classmethod
    def bd3(cls, seq_len: int, block_size: int) -> Layout:
        ids = bd3_block_ids(seq_len, block_size)
        return cls(ids, torch.arange(seq_len), {"all": torch.ones(seq_len, dtype=torch.bool)})

    @property
    def seq_len(self) -> int:
        return len(self.block_ids)

    @property
    def noisy_slots(self) -> torch.Tensor:
        """Dense 0..K-1 index of each noised position's block: which t it uses."""
        return torch.unique(self.block_ids[self.noisy_pos], return_inverse=True)[1]

    @property
    def num_noisy_blocks(self) -> int:
        return int(self.noisy_slots.max().item()) + 1

    def training_inputs(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Positions, condition-slot index and mask of the ``x_t ⊕ x_0`` sequence (slot K is t = 0)."""
        m, n, k = len(self.noisy_pos), self.seq_len, self.num_noisy_blocks
        return {
            "positions": torch.cat([self.noisy_pos, torch.arange(n)]).to(device),
            "cond_idx": torch.cat([self.noisy_slots, torch.full((n,), k)]).to(device),
            "mask": block_diffusion_mask(self.block_ids[self.noisy_pos], self.block_ids).to(device),
            "num_noisy": torch.tensor(m),
        }


def subs_log_probs(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Log-probabilities over clean tokens: the [MASK] logit is forced to −∞."""
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    return F.log_softmax(logits, dim=-1)


def nelbo_per_token(model: nn.Module, x0: torch.Tensor, t: torch.Tensor, layout: Layout,
                    schedule: LogLinearSchedule, mask_id: int, inputs: dict[str, torch.Tensor],
                    attn_mask: object = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Weighted NELBO term of each noised position, shape ``(B, m)``; zero where the token stayed clean.

    ``t`` is ``(B, K)``: one noise level per diffused block. ``attn_mask`` overrides ``inputs["mask"]``
    (a FlexAttention block mask on the GPU).
    """
    device = x0.device
    slots = inputs["cond_idx"][: len(layout.noisy_pos)]
    t_tok = t[:, slots]  # (B, m)
    clean = x0[:, layout.noisy_pos.to(device)]
    if generator is None:
        u = torch.rand(clean.shape, device=device)
    else:
        u = torch.rand(clean.shape, generator=generator).to(device)
    masked = u < schedule.mask_prob(t_tok)
    xt = torch.where(masked, torch.full_like(clean, mask_id), clean)
    t_cond = torch.cat([t, torch.zeros(t.shape[0], 1, device=device)], dim=1)
    mask = inputs["mask"] if attn_mask is None else attn_mask
    logits, _ = model(torch.cat([xt, x0], dim=1), inputs["positions"], t_cond, inputs["cond_idx"],
                      mask=mask, head_len=clean.shape[1], head_rows=masked)
    logits = logits.float()
    logits[:, mask_id] = float("-inf")  # SUBS: [MASK] is never the answer
    nll = F.cross_entropy(logits, clean[masked], reduction="none")
    out = torch.zeros(clean.shape, device=device, dtype=nll.dtype)
    out[masked] = nll * schedule.loss_weight(t_tok[masked])
    return out


def segment_means(per_token: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    """Mean NELBO per token of each named segment (e.g. plan and execution)."""
    return {name: per_token[:, sel.to(per_token.device)].mean() for name, sel in layout.segments.items()}


def search_clip(estimate: Callable[[float, float], torch.Tensor], candidates: Iterable[tuple[float, float]],
                reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[tuple[float, float],
                                                                                      dict[str, float]]:
    """Pick the ``[β, ω]`` whose per-sequence loss estimates have the smallest variance.

    ``estimate(lo, hi)`` returns per-sequence NELBO estimates with t drawn from ``[lo, hi]``; ``reduce``
    sums a tensor over ranks so every rank picks the same range. Returns the range and all variances.
    """
    variances: dict[str, float] = {}
    best: tuple[float, float] | None = None
    best_var = float("inf")
    for lo, hi in candidates:
        est = estimate(lo, hi).double()
        stats = torch.stack([est.sum(), (est * est).sum(), torch.tensor(float(est.numel()), dtype=est.dtype,
                                                                           device=est.device)])
        if reduce is not None:
            stats = reduce(stats)
        mean = stats[0] / stats[2]
        var = float((stats[1] / stats[2] - mean * mean).clamp_min(0.0))
        variances[f"{lo:g}-{hi:g}"] = var
        if var < best_var:
            best, best_var = (lo, hi), var
    if best is None:
        raise ValueError("clip search needs at least one candidate range")
    return best, variances


def draw_times(batch: int, layout: Layout, low: float, high: float, antithetic: bool,
               device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
    return sample_block_times(batch, layout.num_noisy_blocks, low=low, high=high, antithetic=antithetic,
                              generator=generator, device=device)
