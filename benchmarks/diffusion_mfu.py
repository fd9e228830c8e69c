"""BD3-LM training throughput and MFU on one GPU: 12 layers × 768, sequence 1024, bf16.

    python benchmarks/diffusion_mfu.py --batch 32 --attention auto            # the shipped default path
    python benchmarks/diffusion_mfu.py --batch 32 --attention sdpa --compile-mode off   # SDPA eager
    python benchmarks/diffusion_mfu.py --batch 32 --attention auto --ce chunked --profile 3
    python benchmarks/diffusion_mfu.py --batch 32 --vocab-multiple 1 --head-rows exact   # the head before #27
    python benchmarks/diffusion_mfu.py --batch 32 --ce compiled --shared-modulation     # #27's speed levers

``--attention auto`` / ``--compile-mode auto`` ask the one kernel resolver (``gputrain.contract.kernels``) with
this node's facts, as the trainer does. MFU counts the 2n = 2048 processed tokens of ``x_t ⊕ x_0``
(``gputrain.train.diffusion.mfu``): body matmuls over all 2n tokens, the output head over the masked tokens
(n/2 on average for t ~ U[0, 1]), and dense attention scores (``mfu``; ``mfu_no_attention`` leaves them out);
the peak is the hardware catalog's dense bf16 rate for this GPU. Data is random token ids (throughput does
not depend on content). The model is the recipe's: dropout 0.1, no t input. ``--profile N`` adds the top CUDA
kernels of N profiled steps. Prints one JSON line; ``benchmarks/gpu_suite.py`` runs it. Needs a CUDA GPU
(``--device cpu`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch

from gputrain.contract.kernels import KernelRequest
from gputrain.contract.vocab import VOCAB_MULTIPLE
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.train.diffusion.head_rows import BUCKETS
from gputrain.train.diffusion.masks import flex_block_mask
from gputrain.train.diffusion.mfu import flops_per_sequence, mfu
from gputrain.train.diffusion.model import COMPILE_MODES, DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.schedule import LogLinearSchedule
from gputrain.train.runtime.kernels import decide


def catalog_peak(device_name: str) -> float | None:
    try:
        from gputrain.hardware.catalog import from_nvidia_smi

        return from_nvidia_smi(device_name).tflops_bf16
    except Exception:  # a CPU or a GPU the catalog lacks: no MFU
        return None


def top_kernels(prof: Any, steps: int, n: int = 15) -> list[dict[str, Any]]:
    rows = []
    events = [e for e in prof.key_averages() if "CUDA" in str(getattr(e, "device_type", ""))
              and getattr(e, "self_device_time_total", 0) > 0]  # the kernels themselves, not the ops
    total = sum(e.self_device_time_total for e in events) or 1.0
    for e in sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:n]:
        rows.append({"kernel": e.key[:140], "ms_per_step": round(e.self_device_time_total / 1e3 / steps, 3),
                     "share": round(e.self_device_time_total / total, 4), "calls_per_step": e.count // steps})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50258, help="GPT-2 + [MASK]")
    ap.add_argument("--attention", choices=["auto", "sdpa", "flex"], default="auto")
    ap.add_argument("--compile-mode", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--compile", action="store_true", help="same as --compile-mode on")
    shipped = DiffusionAlgorithm()  # the recipe's defaults: a flipped default moves the benchmark's too
    ap.add_argument("--ce", choices=["torch", "chunked", "compiled"], default=shipped.loss_kernel,
                    help="cross-entropy: full logits eagerly, head + loss chunk by chunk, or head + loss as one "
                    "compiled function (algorithm.loss_kernel)")
    ap.add_argument("--shared-modulation", action=argparse.BooleanOptionalAction, default=shipped.shared_modulation,
                    help="adaLN modulation once per sequence, broadcast (algorithm.shared_modulation)")
    ap.add_argument("--inductor-mode", choices=list(COMPILE_MODES), default=shipped.compile_mode,
                    help="torch.compile mode of the blocks (algorithm.compile_mode; model.COMPILE_MODES)")
    ap.add_argument("--vocab-multiple", type=int, default=VOCAB_MULTIPLE, help="head/embedding width rounded up to "
                    "this (1: unpadded, 50,258 columns)")
    ap.add_argument("--head-rows", choices=["bucketed", "exact"], default="bucketed", help="masked rows reach the "
                    "head in fixed-size buckets (default) or exactly (a new shape every step)")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.1, help="the reference's model.dropout")
    ap.add_argument("--time-conditioning", action="store_true", help="feed t to adaLN (off in the reference)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, help="profile this many steps after timing")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke run, no MFU")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: diffusion_mfu needs a CUDA GPU (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    compile_req: bool | str = "auto" if args.compile_mode == "auto" and not args.compile else \
        (args.compile or args.compile_mode == "on")
    kernels = decide(KernelRequest(attention=args.attention, compile=compile_req,  # type: ignore[arg-type]
                                   precision="bf16" if dev.type == "cuda" else "fp32", mask="block"), dev)
    cfg = DiTConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers,
                    num_heads=args.heads, gradient_checkpointing=args.checkpointing, dropout=args.dropout,
                    time_conditioning=args.time_conditioning, vocab_multiple=args.vocab_multiple,
                    shared_modulation=args.shared_modulation)
    model = DiT(cfg).to(dev)
    if kernels.compile:  # as the trainer does
        model.compile_blocks(args.inductor_mode)
    net: torch.nn.Module = model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), fused=dev.type == "cuda")
    layout, sched = Layout.bd3(args.seq_len, args.block_size), LogLinearSchedule()
    inputs = layout.training_inputs(dev)
    flex = flex_block_mask(layout.block_ids, layout.block_ids, dev) if kernels.attention == "flex" else None
    x0 = torch.randint(0, args.vocab - 1, (args.batch, args.seq_len), device=dev)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")

    def step() -> float:
        t = draw_times(args.batch, layout, 0.0, 1.0, True, dev)
        with amp:
            loss = nelbo_per_token(net, x0, t, layout, sched, args.vocab - 1, inputs, attn_mask=flex,
                                   chunked_ce=args.ce == "chunked",
                                   compiled_ce=args.ce == "compiled" and kernels.compile,
                                   row_buckets=BUCKETS if args.head_rows == "bucketed" else None).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tic0 = time.perf_counter()
    step()
    sync()
    first_step_s = time.perf_counter() - tic0  # compile (when on) + warm-up
    for _ in range(max(0, args.warmup - 1)):
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    tic = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    dt = (time.perf_counter() - tic) / args.steps
    seq_s = args.batch / dt
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    n = args.seq_len
    peak = catalog_peak(name) if dev.type == "cuda" else None
    util = mfu(cfg, 2 * n, n // 2, seq_s, peak)  # the head reads the masked half on average
    flops = flops_per_sequence(cfg, 2 * n, n // 2)
    flops_no_att = flops_per_sequence(cfg, 2 * n, n // 2, attention=False)
    out: dict[str, Any] = {
        "device": name, "torch": torch.__version__, "batch": args.batch, "seq_len": n,
        "block_size": args.block_size, "attention": kernels.attention, "compile": kernels.compile,
        "ce": args.ce, "shared_modulation": cfg.shares_modulation, "inductor_mode": args.inductor_mode,
        "head_vocab": cfg.padded_vocab, "head_rows": args.head_rows,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "resolved": kernels.reason, "checkpointing": args.checkpointing, "step_s": round(dt, 4),
        "first_step_s": round(first_step_s, 2), "data_tokens_per_s": round(seq_s * n),
        "processed_tokens_per_s": round(seq_s * 2 * n), "tflops_per_s": round(flops * seq_s / 1e12, 1),
        "flops_per_step": flops * args.batch, "flops_per_step_no_attention": flops_no_att * args.batch,
        "flop_count": "6·N·2n body + 6·D·V·n/2 head + dense attention 12·L·D·(2n)² per sequence",
        "peak_tflops_catalog": peak, "mfu": None if util is None else round(util, 4),
        "mfu_no_attention": None if peak is None else round(flops_no_att * seq_s / (peak * 1e12), 4),
        "loss": round(loss, 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2) if dev.type == "cuda" else None,
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved(dev) / 2**30, 2) if dev.type == "cuda" else None,
    }
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            for _ in range(args.profile):
                step()
            sync()
        out["top_kernels"] = top_kernels(prof, args.profile) if dev.type == "cuda" else []
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
