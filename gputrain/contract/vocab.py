"""The width the output head and the embedding are built at: the vocabulary padded to a multiple of 64.

A GEMM whose vocabulary dimension is not a multiple of 8 cannot use the 16-byte aligned tensor-core kernels:
on the H100/H200 the diffusion head (V = 50,258) ran three sm80 ``align2`` CUTLASS kernels, ~10 % of the
step (benchmarks/RESULTS.md, 2026-11-26). nanoGPT pads GPT-2's 50,257 to 50,304 for the same reason. The
padded ids are never targets and never sampled: the model slices its logits back to the real vocabulary.
One home for the trainer (``train/diffusion/model.py``) and the planner (head FLOPs and memory).
"""

from __future__ import annotations

#: the multiple the head's width is rounded up to (64: aligned for every bf16/fp16 tensor-core tile)
VOCAB_MULTIPLE = 64


def padded_vocab(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """``vocab_size`` rounded up to ``multiple`` (``multiple`` 1: unpadded, the shape before #27)."""
    if multiple < 1:
        raise ValueError(f"vocabulary multiple must be at least 1, got {multiple}")
    return -(-vocab_size // multiple) * multiple
