"""HDP: hierarchical diffusion over Question → Plan → Execution (default 128 + 128 + 256 = 512 tokens).

Why not a segment mask: intersecting a Q/P/E "key segment ≤ query segment" mask with the BD3 mask
removes nothing — every pair BD3 allows already has its key at or before its query. A real hierarchy has
to change what is noised, what is scored and in which order things are generated. The design:

* **Question = clean conditioning.** Q lives only in the clean stream, as block 0: never masked, never in
  ``x_t``, no loss. Every noisy and clean token attends to all of Q (Q is bidirectional inside itself).
  The training sequence is ``x_t[P ⊕ E] ⊕ x_0[Q ⊕ P ⊕ E]`` — Q is not duplicated, so it costs ``q``
  tokens, not ``2q``.
* **Segment-level order.** P and E are separate diffusion units with their own noise level: the plan's
  noisy tokens see Q only; the execution's noisy tokens see Q and the *clean* plan. Generation therefore
  denoises the whole plan first (conditioned on the question), caches it, then the execution. By default
  each segment is one block (bidirectional denoising of a whole plan); ``plan_block`` / ``exec_block``
  split a segment into semi-autoregressive sub-blocks, which keeps the order P-before-E.
* **Separate accounting.** The NELBO per token is reported for P and for E (``val_nelbo_plan``,
  ``val_nelbo_exec``; ``loss_plan``/``loss_exec`` during training); the loss is their token-weighted sum.

Data mapping from GSM8K: Q = the question, P = the calculator annotations in order (``48/2=24; 48+24=72``),
E = the full worked answer ending in ``#### <number>``. The mask, loss, sampler and KV cache are the BD3
ones driven by this layout's block ids (``masks.block_diffusion_mask``), so HDP and BD3-LM cannot drift.
"""

from __future__ import annotations

import torch

from gputrain.train.diffusion.data import Segment, Tokenizer, encode_fixed, plan_of
from gputrain.train.diffusion.objective import Layout


def hdp_layout(q: int, p: int, e: int, plan_block: int = 0, exec_block: int = 0) -> Layout:
    """Block ids: Q is block 0; plan blocks follow, then execution blocks (0 = whole segment)."""
    for name, size, seg in (("plan_block", plan_block, p), ("exec_block", exec_block, e)):
        if size < 0 or (size and seg % size):
            raise ValueError(f"{name}={size} must divide its segment length {seg} (or be 0)")
    pb, eb = plan_block or p, exec_block or e
    plan_ids = 1 + torch.arange(p) // pb
    exec_ids = 1 + p // pb + torch.arange(e) // eb
    ids = torch.cat([torch.zeros(q, dtype=torch.long), plan_ids, exec_ids])
    noisy = torch.arange(q, q + p + e)
    plan = torch.zeros(p + e, dtype=torch.bool)
    plan[:p] = True
    return Layout(ids, noisy, {"plan": plan, "exec": ~plan})


def encode_hdp(tok: Tokenizer, row: dict[str, str], q: int, p: int, e: int) -> list[int]:
    return encode_fixed(tok, [Segment("Question: " + row["question"], q), Segment(plan_of(row["answer"]), p),
                              Segment(row["answer"], e)])
