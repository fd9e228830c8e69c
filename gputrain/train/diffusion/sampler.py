"""Semi-autoregressive sampling: blocks in order, a fixed number of denoising steps inside each block.

Finished blocks are clean, so their keys and values are computed once (at t = 0, exactly as the clean
stream sees them in training) and kept in a KV cache; the block being denoised attends to the cache and
to itself. Inside a block, step ``t → s`` reveals each still-masked token with probability
``(α_s − α_t)/(1 − α_t)`` and draws it from the SUBS distribution, which gives [MASK] zero mass. The last
step has ``s = 0`` and reveals every remaining token, so no [MASK] can survive.

Blocks that are not diffused (HDP's question) are taken from ``prompt`` and only fill the cache.
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


@torch.no_grad()
def sample(model: nn.Module, layout: Layout, schedule: LogLinearSchedule, mask_id: int, batch: int,
           steps_per_block: int, device: torch.device, prompt: torch.Tensor | None = None,
           given: torch.Tensor | None = None, generator: torch.Generator | None = None,
           temperature: float = 1.0) -> torch.Tensor:
    """Token ids ``(batch, seq_len)``.

    ``given`` (bool, ``(seq_len,)`` or ``(batch, seq_len)``) marks the positions copied from ``prompt``;
    the clean-only ones (HDP's question) always are. A diffused block that is partly given (a question
    ending mid-block) starts with those tokens revealed; SUBS keeps them, so only the rest is generated.
    """
    if steps_per_block < 1:
        raise ValueError("sampling needs at least one denoising step per block")
    was_training = model.training
    model.eval()
    n = layout.seq_len
    noisy = torch.zeros(n, dtype=torch.bool)
    noisy[layout.noisy_pos] = True
    given = (~noisy if given is None else given.cpu() | ~noisy).expand(batch, n)
    if prompt is None and bool(given.any()):
        raise ValueError("this layout or request has given positions: pass a prompt")
    out = torch.full((batch, n), mask_id, dtype=torch.long, device=device)
    if prompt is not None:
        out = torch.where(given.to(device), prompt.to(device), out)
    cache: list[KV] | None = None
    zero_idx = torch.zeros(n, dtype=torch.long, device=device)
    for block in torch.unique(layout.block_ids).tolist():
        pos = (layout.block_ids == block).nonzero().squeeze(-1)
        pos_d = pos.to(device)
        idx = zero_idx[: len(pos)]
        if not bool(given[:, pos].all()):
            if not bool(noisy[pos].all()):
                raise ValueError(f"block {block} mixes clean-only and diffused positions")
            x = out[:, pos_d]
            for k in range(steps_per_block, 0, -1):
                t, s = k / steps_per_block, (k - 1) / steps_per_block
                t_cond = torch.full((batch, 1), t, device=device)
                logits, _ = model(x, pos_d, t_cond, idx, past=cache)
                probs = (subs_log_probs(logits, mask_id) / temperature).softmax(-1).double()
                flat = probs.view(-1, probs.shape[-1])
                if generator is not None:
                    flat = flat.cpu()
                draw = torch.multinomial(flat, 1, generator=generator).view(x.shape).to(device)
                mt, ms = float(schedule.mask_prob(torch.tensor(t))), float(schedule.mask_prob(torch.tensor(s)))
                p_reveal = 1.0 if s == 0 else (mt - ms) / mt
                u = torch.rand(x.shape, generator=generator, device=device if generator is None else "cpu")
                reveal = (x == mask_id) & (u.to(device) < p_reveal)
                x = torch.where(reveal, draw, x)
            out[:, pos_d] = x
        _, kv = model(out[:, pos_d], pos_d, torch.zeros(batch, 1, device=device), idx, past=cache)
        cache = _extend(cache, kv)
    model.train(was_training)
    if bool((out == mask_id).any()):
        raise RuntimeError("sampler left a [MASK] token in its output")
    return out
