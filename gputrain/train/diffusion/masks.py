"""Attention masks for block diffusion, as pure functions of block ids.

Training runs one transformer pass over ``x_t ⊕ x_0`` (Arriola et al., "Block Diffusion", ICLR 2025; idea
from kuleshov-group/bd3lms, code our own). Every token carries the id of the diffusion block it belongs to;
the mask is then three rules, whatever the block sizes are:

* a noisy query attends noisy keys of its own block only (block-diagonal ``M_BD``),
* a noisy query attends clean keys of strictly earlier blocks (offset block-causal ``M_OBC``),
* a clean query attends clean keys of its own and earlier blocks (block-causal ``M_BC``); clean queries
  never see noisy keys, so the clean stream is exactly what a KV cache holds at sampling time.

Writing the mask in terms of block ids (rather than ``i // L'``) lets HDP reuse it: the question is a
clean-only block 0, plan and execution blocks follow with larger ids (see ``hdp.py``).
``reference_bd3_mask`` is the brute-force, loop-per-pair form of the paper's definition, kept for tests.
"""

from __future__ import annotations

import torch


def bd3_block_ids(seq_len: int, block_size: int) -> torch.Tensor:
    """Block id of each position of a plain BD3-LM sequence: ``i // L'``."""
    if block_size < 1 or seq_len % block_size:
        raise ValueError(f"sequence length {seq_len} is not a multiple of block size {block_size}")
    return torch.arange(seq_len) // block_size


def block_diffusion_mask(noisy_ids: torch.Tensor, clean_ids: torch.Tensor) -> torch.Tensor:
    """Boolean mask (True = may attend) of shape ``(Sn + Sc, Sn + Sc)`` for the sequence noisy ⊕ clean.

    ``noisy_ids`` are the block ids of the positions that are diffused (the ``x_t`` stream), ``clean_ids``
    those of every position of the clean ``x_0`` stream (which may contain extra clean-only blocks).
    """
    qn, kn = noisy_ids[:, None], noisy_ids[None, :]
    qc, kc = clean_ids[:, None], clean_ids[None, :]
    top = torch.cat([qn == kn, clean_ids[None, :] < qn], dim=1)
    bottom = torch.cat([torch.zeros(len(clean_ids), len(noisy_ids), dtype=torch.bool), kc <= qc], dim=1)
    return torch.cat([top, bottom], dim=0)


def bd3_mask(seq_len: int, block_size: int) -> torch.Tensor:
    """The BD3-LM training mask over ``2n`` tokens (``x_t`` first, then ``x_0``)."""
    ids = bd3_block_ids(seq_len, block_size)
    return block_diffusion_mask(ids, ids)


def reference_bd3_mask(seq_len: int, block_size: int) -> torch.Tensor:
    """Brute-force BD3 mask straight from the paper's three sub-masks, one pair at a time."""
    n = seq_len
    mask = torch.zeros(2 * n, 2 * n, dtype=torch.bool)
    for q in range(2 * n):
        for k in range(2 * n):
            q_noisy, k_noisy = q < n, k < n
            bq, bk = (q % n) // block_size, (k % n) // block_size
            if q_noisy and k_noisy:
                allowed = bq == bk  # M_BD
            elif q_noisy and not k_noisy:
                allowed = bk < bq  # M_OBC
            elif not q_noisy and not k_noisy:
                allowed = bk <= bq  # M_BC
            else:
                allowed = False
            mask[q, k] = allowed
    return mask


def flex_block_mask(noisy_ids: torch.Tensor, clean_ids: torch.Tensor, device: torch.device) -> object:
    """The same rules as a FlexAttention ``BlockMask``: fully masked tiles are skipped on the GPU."""
    from torch.nn.attention.flex_attention import create_block_mask

    n_noisy = len(noisy_ids)
    ids = torch.cat([noisy_ids, clean_ids]).to(device)
    total = len(ids)

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q_noisy, k_noisy = q < n_noisy, k < n_noisy
        bq, bk = ids[q], ids[k]
        same = q_noisy & k_noisy & (bq == bk)
        offset = q_noisy & ~k_noisy & (bk < bq)
        causal = ~q_noisy & ~k_noisy & (bk <= bq)
        return same | offset | causal

    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=total, KV_LEN=total, device=str(device))
