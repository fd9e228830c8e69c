"""Packed log-prob passes through FlexAttention with a document mask: one forward for all packed rows.

``packing.py`` packs rows but hands transformers an explicit 4-D boolean mask, which sends SDPA to its math
kernel (the whole ``L × L`` score matrix), and runs one forward and one log-softmax per packed row and per
sequence: on an H200 that was 10× slower than the padded pass (benchmarks/RESULTS.md, 2026-11-26). Here the
bins are padded to one fixed width (a multiple of 128, FlexAttention's block), stacked into one batch, and the
mask is a FlexAttention ``BlockMask`` built from sequence ids: causal inside a sequence, nothing across
(``mask_mod`` below), so the kernel skips every tile outside the diagonal blocks. transformers passes a
``BlockMask`` straight to its ``flex_attention`` implementation, selected for this call only. The log-probs
of all completions come out of one gather. The GRPO trainer runs it on CUDA with ``algorithm.sequence_packing``
(``packed_pass.py``; H100 2026-11-27, ``benchmarks/gpu_suite.py --steps rl_logprob_flex``: log-prob pass
1.44×, update pass 10× faster than padded). Exactness against the padded pass and the boundary are held by
tests/unit/test_grpo_packing_flex.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from gputrain.train.grpo.packing import pack_lengths, row_lengths

#: FlexAttention's tile: the packed width is a multiple of it, so every call has the same shapes
FLEX_BLOCK = 128


def block_width(tokens: int) -> int:
    """``tokens`` rounded up to FlexAttention's block: the width of a packed bin."""
    return -(-tokens // FLEX_BLOCK) * FLEX_BLOCK


@contextmanager
def flex_attention_implementation(model: torch.nn.Module) -> Iterator[None]:
    """The model's attention runs transformers' ``flex_attention`` inside the block, its own outside."""
    inner = getattr(model, "module", model)
    config: Any = getattr(inner, "config", None)
    if config is None:
        raise ValueError("flex packing needs a transformers model (a .config with _attn_implementation)")
    before = config._attn_implementation
    config._attn_implementation = "flex_attention"
    _keep_one_compiled_kernel(inner.training)
    try:
        yield
    finally:
        config._attn_implementation = before


def _keep_one_compiled_kernel(training: bool) -> None:
    """transformers (5.24) compiles ``flex_attention`` in a singleton and compiles it anew whenever the
    module's ``training`` flag differs from the last call's; the trainer alternates eval (reference, old
    policy) and train (update) every step, so each step would compile twice and dynamo's recompile limit
    would soon drop to the eager kernel. Both compilations are the same ``torch.compile(flex_attention)``
    except on torch 2.6.0 (a training-only mode there), so elsewhere the singleton is told the flag it will
    see. A transformers without this singleton is left alone."""
    try:
        from transformers.integrations.flex_attention import WrappedFlexAttention
    except ImportError:
        return
    if torch.__version__.startswith("2.6.0"):
        return
    inst: Any = getattr(WrappedFlexAttention, "_instance", None)
    if inst is not None and getattr(inst, "_is_flex_compiled", False) and hasattr(inst, "training"):
        inst.training = training


def document_block_mask(seq: torch.Tensor) -> Any:
    """A ``BlockMask`` over ``seq`` (bins × width of sequence ids): a query sees the keys of its own
    sequence at or before it. Padding carries id -1 and so only sees padding (no empty rows, no NaN)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (seq[b, q] == seq[b, kv]) & (q >= kv)

    bins, width = seq.shape
    return create_block_mask(mask_mod, B=bins, H=None, Q_LEN=width, KV_LEN=width, device=seq.device)


def flex_packed_completion_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                    logits_to_keep: int, temperature: float = 1.0, max_tokens: int | None = None,
                                    entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``packing.packed_completion_logprobs``'s result (``[B, logits_to_keep]``, zero on padding) from one
    FlexAttention forward over the packed bins."""
    b, width = input_ids.shape
    dev = input_ids.device
    mask, lengths, n_prompt, n_comp = row_lengths(attention_mask, logits_to_keep)
    bins = pack_lengths(lengths, max_tokens or width)
    fill = [sum(lengths[r] for r in group) for group in bins]
    packed_w = block_width(max(fill))
    ids = torch.zeros(len(bins), packed_w, dtype=input_ids.dtype, device=dev)
    pos = torch.zeros(len(bins), packed_w, dtype=torch.long, device=dev)
    seq = torch.full((len(bins), packed_w), -1, dtype=torch.long, device=dev)
    rows: list[int] = []  # bin, column of each completion token's predicting logit; its row and column
    cols: list[int] = []
    dst_r: list[int] = []
    dst_c: list[int] = []
    for k, group in enumerate(bins):
        offset = 0
        for j, r in enumerate(group):
            n = lengths[r]
            ids[k, offset : offset + n] = input_ids[r][mask[r]]
            pos[k, offset : offset + n] = torch.arange(n, device=dev)
            seq[k, offset : offset + n] = j
            start = offset + n_prompt[r]
            rows += [k] * n_comp[r]
            cols += range(start - 1, start - 1 + n_comp[r])
            dst_r += [r] * n_comp[r]
            dst_c += range(n_comp[r])
            offset += n
    with flex_attention_implementation(model):
        logits = model(input_ids=ids, position_ids=pos, attention_mask=document_block_mask(seq)).logits
    src_r, src_c = torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)
    logp = F.log_softmax(logits[src_r, src_c].float() / temperature, dim=-1)
    chosen = torch.gather(logp, -1, ids[src_r, src_c + 1, None]).squeeze(-1)
    at = (torch.tensor(dst_r, device=dev), torch.tensor(dst_c, device=dev))
    out = torch.zeros(b, logits_to_keep, dtype=chosen.dtype, device=dev).index_put(at, chosen)
    if not entropy:
        return out, None
    ent = -(logp.exp() * logp).sum(-1)
    return out, torch.zeros(b, logits_to_keep, dtype=ent.dtype, device=dev).index_put(at, ent)
