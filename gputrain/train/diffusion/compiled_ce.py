"""The output head and the SUBS cross-entropy as one function for ``torch.compile`` (the loss in a compiled region).

The default loss runs eagerly after the compiled blocks: the head's bf16 logits, an fp32 copy, ``[MASK]``
set to −∞, log-softmax (its fp32 output kept for backward), the gather, and in backward an fp32 gradient of
the same size and its bf16 cast: five or six passes over ``rows × V`` (the eager softmax forward + backward
was 5.9 % of the H100 step, benchmarks/RESULTS.md 2026-11-27). Compiled, Inductor keeps the head's matmul
(cuBLAS) and fuses the cast, the masking, the log-sum-exp and the gather into reductions that read the bf16
logits and write one value per row; backward writes the bf16 gradient of the logits directly.

Same maths as the eager path (the padded head columns and ``[MASK]`` at −∞, then ``F.cross_entropy``);
tests/unit/test_diffusion_fast_paths.py holds the eager form of this function to the default loss in fp32
within 1e-5, forward and gradients. Where Inductor is not used (a CPU run, ``compile`` resolved off) the same
function runs eagerly.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

_COMPILED: Any = None


def head_nll(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
             banned: int, valid: int) -> torch.Tensor:
    """Per-row ``-log softmax(hidden @ weightᵀ + bias)[target]`` over the first ``valid`` columns with column
    ``banned`` excluded (< 0: none), fp32, shape ``(rows,)``."""
    logits = F.linear(hidden, weight, bias).float()
    cols = torch.arange(logits.shape[-1], device=logits.device)
    logits = logits.masked_fill((cols >= valid) | (cols == banned), float("-inf"))
    return F.cross_entropy(logits, target, reduction="none")


def compiled_head_nll() -> Any:
    """:func:`head_nll` compiled once per process. The row count changes with the loss's bucket:
    :func:`head_cross_entropy` marks it dynamic, so one graph serves every bucket (V stays static)."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(head_nll)
    return _COMPILED


def head_cross_entropy(hidden: torch.Tensor, head: torch.nn.Linear, target: torch.Tensor, banned: int,
                       valid: int | None, compiled: bool) -> torch.Tensor:
    """:func:`head_nll` through ``head``; compiled where ``compiled`` and the rows are on a GPU."""
    fn = head_nll
    if compiled and hidden.is_cuda:
        fn = compiled_head_nll()
        for rows in (hidden, target):
            torch._dynamo.maybe_mark_dynamic(rows, 0)
    out: torch.Tensor = fn(hidden, head.weight, head.bias, target, banned,
                           head.weight.shape[0] if valid is None else valid)
    return out
