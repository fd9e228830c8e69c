"""The loss's rows in fixed-size buckets, so the head and the loss see a handful of shapes, not one per step.

Training reads the logits of the masked positions only. Their count changes every step (each block's t is
random), and with it the shape of every ``rows × V`` tensor of the head and the loss (the bf16 logits, the
fp32 copy log-softmax keeps, their gradients: ~1-3 GB each at the benchmark shape). The CUDA caching
allocator cannot reuse a freed block for a slightly larger request, so it keeps reserving new segments:
the H100 benchmark reserved 74 GiB for 37 GiB allocated (benchmarks/RESULTS.md, 2026-11-26). Here the
masked rows are gathered by index and the index is padded to the next multiple of a quantum (1/32 of the
candidate rows, rounded up to 64): a few shapes recur, their blocks are reused, and the padded rows
(copies of row 0) are cut off before the loss reads them, so values and gradients are those of the exact
gather (tests/unit/test_diffusion_vocab_and_rows.py).
"""

from __future__ import annotations

import torch

#: candidate rows per quantum: the padding wastes at most 1/32 of the rows a step could have, about 6 % of
#: the masked ones at the default clip window [0.3, 0.8]
BUCKETS = 32


def row_quantum(candidates: int, buckets: int = BUCKETS) -> int:
    """The bucket step for ``candidates`` possible rows: ``candidates / buckets`` rounded up to 64."""
    per_bucket = -(-candidates // buckets)
    return max(64, -(-per_bucket // 64) * 64)


def bucketed_rows(selected: torch.Tensor, buckets: int = BUCKETS) -> tuple[torch.Tensor, int]:
    """(flat indices of the True entries of ``selected``, padded with 0 to a multiple of the quantum; how many
    are real). The order is ``selected``'s row-major order, the order of ``x[selected]``."""
    flat = selected.reshape(-1).nonzero().squeeze(-1)
    count = flat.numel()
    quantum = row_quantum(selected.numel(), buckets)
    size = max(quantum, -(-count // quantum) * quantum)
    return torch.cat([flat, flat.new_zeros(size - count)]), count
