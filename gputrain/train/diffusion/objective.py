"""The block-diffusion NELBO under the SUBS parameterisation, counted on real tokens.

A ``Layout`` says which positions are diffused and which block each position belongs to, so the same
code trains BD3-LM (every position diffused, blocks of L') and HDP (a clean question block, then plan and
execution blocks). One forward pass sees ``x_t ⊕ x_0``; logits are read on the ``x_t`` half only.

SUBS (Sahoo et al., MDLM): the model never predicts [MASK] (its logit is −∞) and an unmasked token is
copied, so only masked positions contribute, each with ``−log p(x_0)`` weighted by ``−α'_t/(1−α_t)``.

Real tokens: a fixed-length row is text, one end-of-text, then end-of-text padding (per segment for HDP).
The reference weights its per-token NLL by the attention mask and divides by the number of real tokens
(kuleshov-group/bd3lms ``diffusion.py: _loss``); ``real_tokens`` is that mask, so the loss and the NELBO
are per token of text and do not change when padding is appended. Padding is still noised and attended to,
as in the reference; it is only not scored.

Clipped training (``window``): when t is drawn from [β, ω], a block whose masked share falls outside
[β, ω] gets a fresh mask at the same t until it lies inside (``diffusion.py: _resample_q_xt``). A bound at
the edge of [0, 1] is not enforced, as in the reference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gputrain.train.diffusion.chunked_ce import chunked_cross_entropy
from gputrain.train.diffusion.compiled_ce import head_cross_entropy
from gputrain.train.diffusion.head_rows import BUCKETS, bucketed_rows
from gputrain.train.diffusion.masks import bd3_block_ids, block_diffusion_mask
from gputrain.train.diffusion.schedule import MIN_T, LogLinearSchedule, sample_block_times


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


def real_tokens(x0: torch.Tensor, layout: Layout, eos_id: int) -> torch.Tensor:
    """``(B, m)`` bool over the noised positions: True up to and including each segment's first end-of-text.

    The first end-of-text is real (the model must learn where text stops); what follows it is padding.
    A segment without end-of-text (cut to length) is real throughout.
    """
    clean = x0[:, layout.noisy_pos.to(x0.device)]
    out = torch.zeros(clean.shape, dtype=torch.bool, device=x0.device)
    for sel in layout.segments.values():
        cols = sel.nonzero().squeeze(-1).to(x0.device)
        eos = clean[:, cols] == eos_id
        before = torch.cumsum(eos.int(), dim=1) - eos.int()  # end-of-texts strictly before each position
        out[:, cols] = before == 0
    return out


def _rand(shape: torch.Size, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    if generator is None:
        return torch.rand(shape, device=device)
    return torch.rand(shape, generator=generator).to(device)


def check_window(window: tuple[float, float], block_sizes: Iterable[int]) -> None:
    """Refuse a clip window that no masked count of some block can meet (resampling would never end)."""
    lo, hi = window
    for size in set(block_sizes):
        low_k = math.ceil(lo * size - 1e-9) if lo > MIN_T else 0
        high_k = math.floor(hi * size + 1e-9) if hi < 1.0 else size
        if high_k < low_k:
            raise ValueError(f"clip window [{lo:g}, {hi:g}] admits no masked share for a block of {size} tokens")


def draw_masks(t_tok: torch.Tensor, slots: torch.Tensor, schedule: LogLinearSchedule,
               window: tuple[float, float] | None = None, generator: torch.Generator | None = None,
               max_rounds: int = 10_000) -> torch.Tensor:
    """Which noised positions are [MASK]ed, ``(B, m)`` bool; with ``window``, every block's share inside it.

    ``slots`` (m,) gives each position's block. A bound at the edge (β ≤ the schedule's floor, ω = 1) is not
    enforced, so the full range never resamples and the NELBO estimate stays unbiased.
    """
    device = t_tok.device
    prob = schedule.mask_prob(t_tok)
    masked = _rand(t_tok.shape, generator, device) < prob
    if window is None:
        return masked
    lo, hi = window
    if lo <= MIN_T and hi >= 1.0:
        return masked
    sizes = torch.bincount(slots.cpu()).to(device)
    check_window(window, sizes.tolist())
    slots = slots.to(device)
    for _ in range(max_rounds):
        counts = torch.zeros(t_tok.shape[0], len(sizes), device=device).index_add_(1, slots, masked.float())
        share = counts / sizes
        bad = torch.zeros_like(share, dtype=torch.bool)
        if lo > MIN_T:
            bad |= share < lo - 1e-9
        if hi < 1.0:
            bad |= share > hi + 1e-9
        if not bool(bad.any()):
            return masked
        redo = bad[:, slots]
        fresh = _rand(t_tok.shape, generator, device) < prob
        masked = torch.where(redo, fresh, masked)
    raise RuntimeError(f"mask resampling did not meet the clip window [{lo:g}, {hi:g}] in {max_rounds} rounds")


def nelbo_per_token(model: nn.Module, x0: torch.Tensor, t: torch.Tensor, layout: Layout,
                    schedule: LogLinearSchedule, mask_id: int, inputs: dict[str, torch.Tensor],
                    attn_mask: object = None, generator: torch.Generator | None = None,
                    window: tuple[float, float] | None = None, chunked_ce: bool = False,
                    row_buckets: int | None = BUCKETS, compiled_ce: bool = False) -> torch.Tensor:
    """Weighted NELBO term of each noised position, shape ``(B, m)``; zero where the token stayed clean.

    ``t`` is ``(B, K)``: one noise level per diffused block. ``attn_mask`` overrides ``inputs["mask"]``
    (a FlexAttention block mask on the GPU). ``window``: the clip range t was drawn from, for resampling.
    Weight by ``real_tokens`` and divide by their count for the NELBO per token of text. ``chunked_ce``: the
    head and the loss chunk by chunk (``chunked_ce.py``: same values, no full logits tensor).
    ``row_buckets``: the masked rows reach the head in fixed-size buckets (``head_rows.py``: same values,
    a few shapes for the allocator and the compiler); None gathers exactly the masked rows (before #27).
    ``compiled_ce``: the head and the loss as one ``torch.compile``d function on a GPU (``compiled_ce.py``: same
    values, no eager fp32 ``rows × V`` passes).
    """
    device = x0.device
    slots = inputs["cond_idx"][: len(layout.noisy_pos)]
    t_tok = t[:, slots]  # (B, m)
    clean = x0[:, layout.noisy_pos.to(device)]
    masked = draw_masks(t_tok, slots, schedule, window, generator)
    xt = torch.where(masked, torch.full_like(clean, mask_id), clean)
    t_cond = torch.cat([t, torch.zeros(t.shape[0], 1, device=device)], dim=1)
    mask = inputs["mask"] if attn_mask is None else attn_mask
    if row_buckets is None:
        rows, count, target = masked, None, clean[masked]
    else:
        rows, count = bucketed_rows(masked, row_buckets)
        target = clean.reshape(-1).index_select(0, rows)  # padded rows: row 0's token, cut off below
    out_, _ = model(torch.cat([xt, x0], dim=1), inputs["positions"], t_cond, inputs["cond_idx"],
                    mask=mask, head_len=clean.shape[1], head_rows=rows, return_hidden=chunked_ce or compiled_ce)
    if chunked_ce or compiled_ce:
        inner = _unwrap(model)
        head, valid = inner.head, getattr(getattr(inner, "cfg", None), "vocab_size", None)  # head may be padded
        assert isinstance(head, nn.Linear)
        nll = chunked_cross_entropy(out_, head, target, banned=mask_id, valid=valid) if chunked_ce else \
            head_cross_entropy(out_, head, target, mask_id, valid, compiled=True)  # SUBS: [MASK] never wins
    else:
        logits = out_.float()
        logits[:, mask_id] = float("-inf")  # SUBS: [MASK] is never the answer
        nll = F.cross_entropy(logits, target, reduction="none")
    if count is not None:
        nll = nll[:count]
    out = torch.zeros(clean.shape, device=device, dtype=nll.dtype)
    out[masked] = nll * schedule.loss_weight(t_tok[masked])
    return out


def _unwrap(model: nn.Module) -> nn.Module:
    """The DiT inside a torch.compile and/or DDP wrapper (its head's parameters)."""
    inner = getattr(model, "_orig_mod", model)
    return getattr(inner, "module", inner)


def real_mean(per_token: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """NELBO per real token: the reference's ``nlls.sum() / attention_mask.sum()``."""
    return (per_token * real).sum() / real.sum().clamp_min(1)


def segment_sums(per_token: torch.Tensor, real: torch.Tensor, layout: Layout
                 ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(NELBO sum, real-token count) of each named segment (e.g. plan and execution)."""
    out = {}
    for name, sel in layout.segments.items():
        cols = sel.to(per_token.device)
        w = real[:, cols]
        out[name] = ((per_token[:, cols] * w).sum(), w.sum())
    return out


def segment_means(per_token: torch.Tensor, layout: Layout, real: torch.Tensor | None = None
                  ) -> dict[str, torch.Tensor]:
    """Mean NELBO per real token of each named segment (every position counts when ``real`` is None)."""
    if real is None:
        real = torch.ones_like(per_token, dtype=torch.bool)
    return {name: s / n.clamp_min(1) for name, (s, n) in segment_sums(per_token, real, layout).items()}


def draw_times(batch: int, layout: Layout, low: float, high: float, antithetic: bool,
               device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
    return sample_block_times(batch, layout.num_noisy_blocks, low=low, high=high, antithetic=antithetic,
                              generator=generator, device=device)
