"""BD3-LM training throughput and MFU on one GPU: 12 layers × 768, sequence 1024, bf16.

    python benchmarks/diffusion_mfu.py --batch 32 --attention flex --compile
    python benchmarks/diffusion_mfu.py --batch 32 --attention sdpa            # the default path

MFU counts the 2n = 2048 processed tokens of ``x_t ⊕ x_0`` (``gputrain.train.diffusion.mfu``): body
matmuls over all 2n tokens, the output head over the masked tokens (n/2 on average for t ~ U[0, 1]),
dense attention scores. Data is random
token ids (throughput does not depend on content). The model is the recipe's: dropout 0.1, no t input
(``--time-conditioning`` for the old setting). Prints one JSON line; copy it into
``benchmarks/RESULTS.md`` with the device name and date. Needs a CUDA GPU (``--device cpu`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from gputrain.train.diffusion.masks import flex_block_mask
from gputrain.train.diffusion.mfu import flops_per_sequence, mfu
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_times, nelbo_per_token
from gputrain.train.diffusion.schedule import LogLinearSchedule


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50258, help="GPT-2 + [MASK]")
    ap.add_argument("--attention", choices=["sdpa", "flex"], default="sdpa")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.1, help="the reference's model.dropout")
    ap.add_argument("--time-conditioning", action="store_true", help="feed t to adaLN (off in the reference)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke run, no MFU")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: diffusion_mfu needs a CUDA GPU (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = DiTConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers,
                    num_heads=args.heads, gradient_checkpointing=args.checkpointing, dropout=args.dropout,
                    time_conditioning=args.time_conditioning)
    model = DiT(cfg).to(dev)
    net: torch.nn.Module = torch.compile(model) if args.compile else model  # type: ignore[assignment]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), fused=dev.type == "cuda")
    layout, sched = Layout.bd3(args.seq_len, args.block_size), LogLinearSchedule()
    inputs = layout.training_inputs(dev)
    flex = flex_block_mask(layout.block_ids, layout.block_ids, dev) if args.attention == "flex" else None
    if flex is not None and dev.type != "cuda":
        print("error: --attention flex needs --device cuda", file=sys.stderr)
        return 2
    x0 = torch.randint(0, args.vocab - 1, (args.batch, args.seq_len), device=dev)

    def step() -> float:
        t = draw_times(args.batch, layout, 0.0, 1.0, True, dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = nelbo_per_token(net, x0, t, layout, sched, args.vocab - 1, inputs, attn_mask=flex).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    for _ in range(args.warmup):
        step()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    tic = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    dt = (time.perf_counter() - tic) / args.steps
    seq_s = args.batch / dt
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    n = args.seq_len
    util = mfu(cfg, 2 * n, n // 2, seq_s, name)  # the head reads the masked half on average
    print(json.dumps({
        "device": name, "torch": torch.__version__, "batch": args.batch, "seq_len": n,
        "block_size": args.block_size, "attention": args.attention, "compile": args.compile,
        "checkpointing": args.checkpointing, "step_s": round(dt, 4),
        "data_tokens_per_s": round(seq_s * n), "processed_tokens_per_s": round(seq_s * 2 * n),
        "tflops_per_s": round(flops_per_sequence(cfg, 2 * n, n // 2) * seq_s / 1e12, 1),
        "mfu": None if util is None else round(util, 4), "loss": round(loss, 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2) if dev.type == "cuda" else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
