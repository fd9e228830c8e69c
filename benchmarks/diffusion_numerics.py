"""Numerical checks of the block-diffusion paths: FlexAttention vs SDPA, bf16/fp16 vs fp32, chunked CE.

    python benchmarks/diffusion_numerics.py --device cuda      # the GPU suite's step "numerics"
    python benchmarks/diffusion_numerics.py --device cpu       # smoke

One small DiT (4 layers × 256, vocabulary 2048, BD3 sequence 256, block 16), dropout off, fixed weights and
batch. Reports the largest absolute difference of the NELBO terms and of every parameter gradient between
(a) FlexAttention with the block mask and SDPA with the dense boolean mask, in fp32 and in bf16 (forward only
on a CPU: FlexAttention has no backward there); (b) bf16 and
fp16 autocast against fp32; (c) the chunked cross-entropy against the full logits. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from gputrain.train.diffusion.masks import flex_block_mask
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.schedule import LogLinearSchedule


def terms_and_grads(model: DiT, x0: torch.Tensor, t: torch.Tensor, layout: Layout, inputs: dict[str, torch.Tensor],
                    mask: object, dtype: torch.dtype | None, chunked: bool = False, grads: bool = True
                    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    gen = torch.Generator().manual_seed(7)
    with torch.autocast(x0.device.type, dtype=dtype or torch.float32, enabled=dtype is not None), \
            torch.set_grad_enabled(grads):
        per_tok = nelbo_per_token(model, x0, t, layout, LogLinearSchedule(), model.cfg.vocab_size - 1, inputs,
                                  attn_mask=mask, generator=gen, chunked_ce=chunked)
    if not grads:
        return per_tok.float(), []
    per_tok.sum().backward()
    return per_tok.detach().float(), [p.grad.detach().float().clone() for p in model.parameters()
                                      if p.grad is not None]


def diff(a: tuple[torch.Tensor, list[torch.Tensor]], b: tuple[torch.Tensor, list[torch.Tensor]]) -> dict[str, float]:
    scale = max(float(a[0].abs().max()), 1e-12)
    if not b[1]:  # forward only (FlexAttention has no backward on a CPU)
        return {"terms_max_abs": float((a[0] - b[0]).abs().max())}
    grad = max(float((x - y).abs().max()) for x, y in zip(a[1], b[1], strict=True))
    gscale = max(float(x.abs().max()) for x in a[1])
    return {"terms_max_abs": float((a[0] - b[0]).abs().max()), "terms_max_rel": float((a[0] - b[0]).abs().max()) / scale,
            "grad_max_abs": grad, "grad_max_rel": grad / max(gscale, 1e-12)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    small = dev.type == "cpu"
    cfg = DiTConfig(vocab_size=258 if small else 2048, hidden_size=64 if small else 256, num_layers=2 if small else 4,
                    num_heads=4, cond_dim=32, dropout=0.0)
    model = DiT(cfg).to(dev)
    for p in model.parameters():  # the zero-initialised head and adaLN would hide differences
        torch.nn.init.normal_(p, std=0.02)
    layout = Layout.bd3(64 if small else 256, 16)
    inputs = layout.training_inputs(dev)
    x0 = torch.randint(0, cfg.vocab_size - 1, (2 if small else 8, layout.seq_len), device=dev)
    t = draw_times(x0.shape[0], layout, 0.0, 1.0, True, dev, generator=torch.Generator().manual_seed(3))
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                           "torch": torch.__version__}
    fp32 = terms_and_grads(model, x0, t, layout, inputs, None, None)
    flex = flex_block_mask(layout.block_ids, layout.block_ids, dev)
    out["flex_vs_sdpa_fp32"] = diff(fp32, terms_and_grads(model, x0, t, layout, inputs, flex, None,
                                                          grads=dev.type == "cuda"))
    out["chunked_ce_vs_full_fp32"] = diff(fp32, terms_and_grads(model, x0, t, layout, inputs, None, None, True))
    if dev.type == "cuda":
        bf16 = terms_and_grads(model, x0, t, layout, inputs, None, torch.bfloat16)
        out["flex_vs_sdpa_bf16"] = diff(bf16, terms_and_grads(model, x0, t, layout, inputs, flex, torch.bfloat16))
        out["bf16_vs_fp32"] = diff(fp32, bf16)
        out["fp16_vs_fp32"] = diff(fp32, terms_and_grads(model, x0, t, layout, inputs, None, torch.float16))
        out["chunked_ce_vs_full_bf16"] = diff(bf16, terms_and_grads(model, x0, t, layout, inputs, flex,
                                                                    torch.bfloat16, True))
    # relative to the largest term/gradient: the NELBO terms carry the 1/t weight (hundreds at small t)
    worst = max(v for k, v in out["flex_vs_sdpa_fp32"].items() if k.endswith("max_rel" if dev.type == "cuda"
                                                                               else "max_abs"))
    out["ok_fp32"] = worst < 1e-5
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
