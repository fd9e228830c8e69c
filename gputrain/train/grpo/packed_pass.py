"""The trainer's log-prob and update passes, padded or packed (``algorithm.sequence_packing``), and a tally
of the tokens each pass put through the model.

Packed, each completion's log-probs (and entropies) come out as ``[B, logits_to_keep]`` with zeros on
padding, the shape the padded pass has, so ``loss.grpo_loss`` gets the same completion mask and the same
token counts: token-level aggregation, advantages, KL and entropy normalise exactly as padded; only the
compute on padding is gone. Which packer: where the resolver allows FlexAttention (``use_flex``),
``packing_flex`` (one FlexAttention forward with a document ``BlockMask``; H100 2026-11-27: log-prob pass
1.44× faster, update pass 10× faster than padded,
fp32 gradients within 2.4e-6). Elsewhere ``packing`` (an explicit block-diagonal mask, eager): torch has no
FlexAttention backward on the CPU (2.13: "does not support backward on CPU") and compiles it for ~15 s, so
the update could not run there; the eager packer is exact (tests/unit/test_grpo_packing.py) and has a
backward, so a CPU run with packing on does what it says instead of being refused.
A bin holds at most the padded width (FlexAttention: rounded up to its 128-token block, which it pads to
anyway); a micro-batch whose packed form would process as many tokens as its padded form (little padding, or
long sequences that fill a bin each) runs padded: the result is the same and never costs more.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from gputrain.contract.kernels import flex_blocker
from gputrain.train.grpo.loss import completion_logprobs, completion_logprobs_and_entropy
from gputrain.train.grpo.packing import pack_lengths, packed_completion_logprobs
from gputrain.train.grpo.packing_flex import block_width, flex_packed_completion_logprobs
from gputrain.train.runtime.kernels import detect_facts


@dataclass
class TokenTally:
    """Tokens of one step: real (attention mask) vs put through the model by each pass (padding included)."""

    real: int = 0
    logprob: int = 0
    update: int = 0


@functools.cache
def use_flex(device: torch.device) -> bool:
    """FlexAttention where the one resolver allows it (``contract.kernels.flex_blocker`` on this node's facts:
    CUDA, Ampere or later, a torch with block masks and Triton), the planner's test too, so a packed plan is
    charged the compile exactly where the trainer compiles. Elsewhere (CPU, a V100) the eager packer."""
    return flex_blocker(detect_facts(device)) is None


def bin_tokens(width: int, flex: bool) -> int:
    return block_width(width) if flex else width


def processed_tokens(attention_mask: torch.Tensor, packing: bool, flex: bool) -> int:
    """Tokens one pass over ``attention_mask``'s rows processes: the full width padded; packed, the bins'
    fill (eager) or bins × the 128-aligned width (FlexAttention); the padded count where packing saves nothing."""
    padded = int(attention_mask.numel())
    if not packing:
        return padded
    lengths = attention_mask.sum(1).tolist()
    bins = pack_lengths(lengths, bin_tokens(attention_mask.size(1), flex))
    fill = [sum(lengths[r] for r in group) for group in bins]
    packed = len(bins) * block_width(max(fill)) if flex else sum(fill)
    return min(packed, padded)


def logprob_pass(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int,
                 temperature: float, micro: int, packing: bool, tally: TokenTally) -> torch.Tensor:
    """Old-policy or reference log-probs ``[B, keep]``, ``micro`` rows per forward."""
    if not packing:
        tally.logprob += processed_tokens(attention_mask, False, False)
        return completion_logprobs(model, input_ids, attention_mask, keep, temperature, micro)
    flex = use_flex(input_ids.device)
    packer = flex_packed_completion_logprobs if flex else packed_completion_logprobs
    out = []
    for s in range(0, input_ids.size(0), micro):
        ids, attn = input_ids[s : s + micro], attention_mask[s : s + micro]
        n = processed_tokens(attn, True, flex)
        tally.logprob += n
        if n >= attn.numel():
            out.append(completion_logprobs(model, ids, attn, keep, temperature))
        else:
            out.append(packer(model, ids, attn, keep, temperature, bin_tokens(attn.size(1), flex))[0])
    return torch.cat(out, dim=0)


def update_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int,
                    temperature: float, packing: bool, tally: TokenTally) -> tuple[torch.Tensor, torch.Tensor]:
    """One micro-batch's log-probs and entropies with gradients (the update pass)."""
    if not packing:
        tally.update += processed_tokens(attention_mask, False, False)
        return completion_logprobs_and_entropy(model, input_ids, attention_mask, keep, temperature)
    flex = use_flex(input_ids.device)
    packer = flex_packed_completion_logprobs if flex else packed_completion_logprobs
    n = processed_tokens(attention_mask, True, flex)
    tally.update += n
    if n >= attention_mask.numel():
        return completion_logprobs_and_entropy(model, input_ids, attention_mask, keep, temperature)
    lp, ent = packer(model, input_ids, attention_mask, keep, temperature, bin_tokens(attention_mask.size(1), flex),
                     entropy=True)
    assert ent is not None
    return lp, ent
