"""Semi-autoregressive sampling: blocks in order, each denoised from all-[MASK] to clean.

Finished blocks are clean, so their keys and values are computed once (at t = 0, exactly as the clean
stream sees them in training) and kept in a KV cache; the block being denoised attends to the cache and
to itself. Blocks that are not diffused (HDP's question) are taken from ``prompt`` and only fill the cache.

Inside a block, two samplers (kuleshov-group/bd3lms ``diffusion.py: _semi_ar_sampler``,
``_ddpm_caching_update``; ``sampling.first_hitting: True`` is the reference's default):

* **First hitting** (Zheng et al., 2025, "Masked diffusion models are secretly time-agnostic masked models
  and exploit inaccurate categorical sampling"): each step reveals exactly one still-masked token, chosen
  uniformly, drawn from the model's distribution; t jumps to the time the next token is unmasked,
  ``t ← t·u^(1/#masked)``. A block of L tokens takes exactly L network calls and no step is wasted.
* **Fixed steps** (``first_hitting=False``): ``steps`` steps ``t → s`` per block, each revealing a masked
  token with probability ``(α_s − α_t)/(1 − α_t)``; the last step (s = 0) reveals the rest. ``steps=None``
  gives each block as many steps as it has tokens (HDP's 128-token plan gets 128, not ``block_size``).
  A step that revealed nothing leaves the input unchanged; with a network that does not see t its output
  is reused instead of recomputed (the reference's ``p_x0`` cache).

Each token is drawn from the SUBS distribution (no mass on [MASK]) with temperature and nucleus (top-p)
filtering as the reference's ``_nucleus_sample``: tokens whose cumulative probability stays within p are
kept, the most likely always. With ``eos_id``, a segment ends at its first end-of-text: what follows is
set to end-of-text, which is what the clean stream holds there in training, before it enters the cache.
"""

from __future__ import annotations

import torch
from torch import nn

from gputrain.train.diffusion.model import KV
from gputrain.train.diffusion.objective import Layout, subs_log_probs
from gputrain.train.diffusion.schedule import LogLinearSchedule


def _extend(cache: list[KV] | None, new: list[KV]) -> list[KV]:
    if cache is None:
        return new
    pairs = zip(cache, new, strict=True)
    return [(torch.cat([k0, k1], dim=2), torch.cat([v0, v1], dim=2)) for (k0, v0), (k1, v1) in pairs]


def nucleus(probs: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens whose cumulative probability is at most ``p`` (always the first)."""
    if p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = sorted_probs.cumsum(dim=-1) <= p
    keep[..., 0] = True
    filtered = torch.zeros_like(probs).scatter_(-1, order, sorted_probs * keep)
    return filtered / filtered.sum(dim=-1, keepdim=True)


def _rand(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    return torch.rand(shape, generator=generator).to(device) if generator is not None \
        else torch.rand(shape, device=device)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    flat = probs.reshape(-1, probs.shape[-1])
    if generator is not None:
        flat = flat.cpu()
    return torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1]).to(probs.device)


class _Block:
    """The network's token distributions for the block being denoised."""

    def __init__(self, model: nn.Module, pos: torch.Tensor, cache: list[KV] | None, mask_id: int,
                 temperature: float, top_p: float) -> None:
        self.model, self.pos, self.cache, self.mask_id = model, pos, cache, mask_id
        self.temperature, self.top_p = temperature, top_p
        self.idx = torch.zeros(len(pos), dtype=torch.long, device=pos.device)
        self.calls = 0

    def probs(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        logits, _ = self.model(x, self.pos, t[:, None], self.idx, past=self.cache)
        probs = (subs_log_probs(logits, self.mask_id) / self.temperature).softmax(-1).double()
        return nucleus(probs, self.top_p)


def _first_hitting(block: _Block, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    rows = torch.arange(x.shape[0], device=x.device)
    t = torch.ones(x.shape[0], device=x.device)
    while bool((masked := x == block.mask_id).any()):
        left = masked.sum(-1)
        active = left > 0
        t = torch.where(active, t * _rand((x.shape[0],), generator, x.device) ** (1.0 / left.clamp_min(1)), t)
        probs = block.probs(x, t.float())
        score = torch.where(masked, _rand(tuple(x.shape), generator, x.device), torch.full_like(x, -1.0,
                                                                                             dtype=torch.float))
        j = score.argmax(-1)  # one masked position per row, uniformly
        token = _draw(probs[rows, j], generator)
        x = x.clone()
        x[rows[active], j[active]] = token[active]
    return x


def _fixed_steps(block: _Block, x: torch.Tensor, steps: int, schedule: LogLinearSchedule,
                 generator: torch.Generator | None, reuse: bool) -> torch.Tensor:
    probs: torch.Tensor | None = None
    for k in range(steps, 0, -1):
        if not bool((x == block.mask_id).any()):
            break
        t, s = k / steps, (k - 1) / steps
        if probs is None or not reuse:
            probs = block.probs(x, torch.full((x.shape[0],), t, device=x.device))
        draw = _draw(probs, generator)
        mt, ms = float(schedule.mask_prob(torch.tensor(t))), float(schedule.mask_prob(torch.tensor(s)))
        p_reveal = 1.0 if s == 0 else (mt - ms) / mt
        reveal = (x == block.mask_id) & (_rand(tuple(x.shape), generator, x.device) < p_reveal)
        if bool(reveal.any()):
            x = torch.where(reveal, draw, x)
            probs = None
    return x


def _end_segments(out: torch.Tensor, given: torch.Tensor, layout: Layout, eos_id: int) -> None:
    """In place: every position after a segment's first end-of-text becomes end-of-text and given."""
    for sel in layout.segments.values():
        cols = layout.noisy_pos[sel].to(out.device)
        eos = out[:, cols] == eos_id
        after = (torch.cumsum(eos.int(), dim=1) - eos.int()) > 0
        out[:, cols] = torch.where(after, torch.full_like(out[:, cols], eos_id), out[:, cols])
        given[:, cols.cpu()] |= after.cpu()


@torch.no_grad()
def sample(model: nn.Module, layout: Layout, schedule: LogLinearSchedule, mask_id: int, batch: int,
           steps_per_block: int | None, device: torch.device, prompt: torch.Tensor | None = None,
           given: torch.Tensor | None = None, generator: torch.Generator | None = None,
           temperature: float = 1.0, *, first_hitting: bool = True, nucleus_p: float = 1.0,
           eos_id: int | None = None) -> torch.Tensor:
    """Token ids ``(batch, seq_len)``.

    ``given`` (bool, ``(seq_len,)`` or ``(batch, seq_len)``) marks the positions copied from ``prompt``;
    the clean-only ones (HDP's question) always are. A diffused block that is partly given (a question
    ending mid-block) starts with those tokens revealed; SUBS keeps them, so only the rest is generated.
    ``steps_per_block`` is read by the fixed-steps sampler only (None: the block's length).
    """
    if steps_per_block is not None and steps_per_block < 1:
        raise ValueError("sampling needs at least one denoising step per block")
    was_training = model.training
    model.eval()
    n = layout.seq_len
    noisy = torch.zeros(n, dtype=torch.bool)
    noisy[layout.noisy_pos] = True
    given = (~noisy if given is None else given.cpu() | ~noisy).expand(batch, n).clone()
    if prompt is None and bool(given.any()):
        raise ValueError("this layout or request has given positions: pass a prompt")
    out = torch.full((batch, n), mask_id, dtype=torch.long, device=device)
    if prompt is not None:
        out = torch.where(given.to(device), prompt.to(device), out)
    reuse = not bool(getattr(getattr(model, "cfg", None), "time_conditioning", True))
    cache: list[KV] | None = None
    for blk in torch.unique(layout.block_ids).tolist():
        pos = (layout.block_ids == blk).nonzero().squeeze(-1)
        pos_d = pos.to(device)
        if not bool(given[:, pos].all()):
            if not bool(noisy[pos].all()):
                raise ValueError(f"block {blk} mixes clean-only and diffused positions")
            block = _Block(model, pos_d, cache, mask_id, temperature, nucleus_p)
            x = torch.where(given[:, pos].to(device), out[:, pos_d], torch.full_like(out[:, pos_d], mask_id))
            if first_hitting:
                x = _first_hitting(block, x, generator)
            else:
                x = _fixed_steps(block, x, steps_per_block or len(pos), schedule, generator, reuse)
            out[:, pos_d] = x
            if eos_id is not None:
                _end_segments(out, given, layout, eos_id)
        idx = torch.zeros(len(pos), dtype=torch.long, device=device)
        _, kv = model(out[:, pos_d], pos_d, torch.zeros(batch, 1, device=device), idx, past=cache)
        cache = _extend(cache, kv)
    model.train(was_training)
    if bool((out == mask_id).any()):
        raise RuntimeError("sampler left a [MASK] token in its output")
    return out
