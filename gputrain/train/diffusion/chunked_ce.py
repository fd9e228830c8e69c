"""Cross-entropy over a large vocabulary without materialising the logits: the head and the loss per chunk.

The training loss reads the masked rows only (~n/2 of them per sequence), each against a 50k-word vocabulary:
at batch 128 × 512 that is 32k × 50k logits, 3.3 GB in bf16 and twice that per fp32 copy, and eager PyTorch
keeps several copies (the fp32 cast, log-softmax's output for backward, its gradient). Here the output head
and the loss run chunk by chunk: forward keeps only each row's log-sum-exp; backward recomputes a chunk's logits
(one more head matmul, ~3 % of the step's FLOPs) and turns them into the gradients of the hidden rows and of
the head at once. Same maths as ``F.cross_entropy(head(h).float() with [MASK] at -inf)``; the unit tests hold
it to fp32 within 1e-5, forward and gradients. The idea is Liger-Kernel's fused linear cross-entropy; the code
is our own and plain PyTorch (no Triton), so it runs eager, compiled or on a CPU alike.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    dev = h.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else h.dtype


class _ChunkedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                banned: int, chunk: int, valid: int) -> torch.Tensor:
        dtype = _compute_dtype(h)
        w = weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        rows = h.shape[0]
        nll = torch.empty(rows, dtype=torch.float32, device=h.device)
        lse = torch.empty(rows, dtype=torch.float32, device=h.device)
        for i in range(0, rows, chunk):
            logits = F.linear(h[i : i + chunk].to(dtype), w, b).float()
            logits[:, valid:] = float("-inf")  # the head's padding columns (full width: aligned GEMMs)
            if banned >= 0:
                logits[:, banned] = float("-inf")
            lse[i : i + chunk] = torch.logsumexp(logits, dim=-1)
            nll[i : i + chunk] = lse[i : i + chunk] - logits.gather(1, target[i : i + chunk, None]).squeeze(1)
        ctx.save_for_backward(h, weight, bias if bias is not None else torch.empty(0), target, lse)
        ctx.dtype, ctx.banned, ctx.chunk, ctx.has_bias, ctx.valid = dtype, banned, chunk, bias is not None, valid
        return nll

    @staticmethod
    def backward(ctx: Any, grad_nll: torch.Tensor) -> tuple[Any, ...]:
        h, weight, bias, target, lse = ctx.saved_tensors
        dtype, chunk, valid = ctx.dtype, ctx.chunk, ctx.valid
        w = weight.to(dtype)
        b = bias.to(dtype) if ctx.has_bias else None
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if ctx.has_bias else None
        for i in range(0, h.shape[0], chunk):
            hc = h[i : i + chunk].to(dtype)
            logits = F.linear(hc, w, b).float()
            logits[:, valid:] = float("-inf")
            if ctx.banned >= 0:
                logits[:, ctx.banned] = float("-inf")
            p = torch.exp(logits - lse[i : i + chunk, None])  # softmax; 0 at the banned column
            p[torch.arange(p.shape[0], device=p.device), target[i : i + chunk]] -= 1.0
            p *= grad_nll[i : i + chunk, None].float()
            if grad_b is not None:
                grad_b += p.sum(0)
            pc = p.to(dtype)
            grad_h[i : i + chunk] = (pc @ w).to(h.dtype)
            grad_w += (pc.t() @ hc).float()  # zero on the padded rows: p is 0 there
        return (grad_h, grad_w.to(weight.dtype), grad_b.to(bias.dtype) if grad_b is not None else None,
                None, None, None, None)


def chunked_cross_entropy(h: torch.Tensor, head: torch.nn.Linear, target: torch.Tensor, banned: int = -1,
                          chunk: int = 4096, valid: int | None = None) -> torch.Tensor:
    """Per-row ``-log softmax(head(h))[target]`` with column ``banned`` excluded, shape ``(rows,)``, fp32.
    ``valid``: only the first ``valid`` columns are the vocabulary (the rest pads the head's width)."""
    cols = head.weight.shape[0] if valid is None else valid
    out: torch.Tensor = _ChunkedCE.apply(h, head.weight, head.bias, target, banned, chunk, cols)
    return out
