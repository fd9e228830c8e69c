"""Log-prob and update passes on packed sequences: no compute on padding.

A rollout batch is ``[B, prompt + completion]`` with left-padded prompts and right-padded completions; the
padded passes (``loss.completion_logprobs``) run the model over every column, so with completions of very
different lengths most of the work can be padding. Here each row's real tokens are cut out and packed, first
fit by decreasing length, into rows of at most ``max_tokens``; ``position_ids`` restart at 0 for every
sequence and an explicit block-diagonal causal mask (4-D, which transformers passes to the attention kernel
as it is) keeps every token inside its own sequence (tests/unit/test_grpo_packing.py fails if one attends
across; transformers' detection of packed ``position_ids`` alone did leak in 5.24 with SDPA). Rotary
positions are relative, so each sequence's log-probs equal the padded pass's (fp32: within 1e-5). The same idea as TRL's
``padding_free`` and verl's ``use_remove_padding``; the code is our own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def pack_lengths(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Row indices grouped into bins of at most ``max_tokens`` tokens (first fit, longest first); a sequence
    longer than ``max_tokens`` gets a bin of its own."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for b, left in enumerate(room):
            if lengths[i] <= left:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(max(0, max_tokens - lengths[i]))
    return bins


def packed_tokens(attention_mask: torch.Tensor, max_tokens: int) -> tuple[int, int]:
    """(tokens the packed passes process, tokens the padded pass processes) for a batch."""
    lengths = attention_mask.sum(1).tolist()
    bins = pack_lengths(lengths, max_tokens)
    return sum(sum(lengths[i] for i in b) for b in bins), attention_mask.numel()


def block_causal_mask(seq: torch.Tensor) -> torch.Tensor:
    """``[1, 1, L, L]`` boolean (True = may attend): causal, and only within the same sequence id."""
    same = seq[:, None] == seq[None, :]
    causal = torch.ones(len(seq), len(seq), dtype=torch.bool, device=seq.device).tril()
    return (same & causal)[None, None]


def row_lengths(attention_mask: torch.Tensor, logits_to_keep: int
                ) -> tuple[torch.Tensor, list[int], list[int], list[int]]:
    """The boolean mask and, per row, its real tokens, prompt tokens and completion tokens; the last
    ``logits_to_keep`` columns are the completion, which must be right-padded (real tokens first)."""
    b, width = attention_mask.shape
    prompt_cols = width - logits_to_keep
    mask = attention_mask.bool()
    lengths = mask.sum(1).tolist()
    n_prompt = mask[:, :prompt_cols].sum(1).tolist()
    n_comp = mask[:, prompt_cols:].sum(1).tolist()
    if any(bool(mask[r, prompt_cols + n_comp[r]:].any()) for r in range(b) if n_comp[r] < logits_to_keep):
        raise ValueError("completions must be right-padded (real tokens first) to be packed")
    return mask, lengths, n_prompt, n_comp


def packed_completion_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                               logits_to_keep: int, temperature: float = 1.0, max_tokens: int | None = None,
                               entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[B, logits_to_keep]`` of the completion columns, as ``completion_logprobs`` gives them,
    from packed rows; zero where the completion is padding. With ``entropy``, the per-token entropy too."""
    b, width = input_ids.shape
    mask, lengths, n_prompt, n_comp = row_lengths(attention_mask, logits_to_keep)
    logps: list[torch.Tensor | None] = [None] * b
    ents: list[torch.Tensor | None] = [None] * b
    for group in pack_lengths(lengths, max_tokens or width):
        ids = torch.cat([input_ids[r][mask[r]] for r in group])[None]
        pos = torch.cat([torch.arange(lengths[r], device=input_ids.device) for r in group])[None]
        seq = torch.cat([torch.full((lengths[r],), k, device=input_ids.device) for k, r in enumerate(group)])
        logits = model(input_ids=ids, position_ids=pos, attention_mask=block_causal_mask(seq)).logits[0]
        offset = 0
        for r in group:
            start = offset + n_prompt[r]
            lg = logits[start - 1 : start - 1 + n_comp[r]].float() / temperature
            logp = F.log_softmax(lg, dim=-1)
            logps[r] = torch.gather(logp, -1, ids[0, start : start + n_comp[r], None]).squeeze(-1)
            if entropy:
                ents[r] = -(logp.exp() * logp).sum(-1)
            offset += lengths[r]

    def stack(parts: list[torch.Tensor | None]) -> torch.Tensor:
        return torch.stack([F.pad(p, (0, logits_to_keep - p.shape[0])) for p in parts if p is not None])

    return stack(logps), (stack(ents) if entropy else None)
