"""A tiny training on the shared runtime, used by the runtime tests (not collected by pytest).

It exercises what the bundled entrypoints rely on: DDP over gloo, a DistributedSampler whose position is
checkpointed mid-epoch, dropout (RNG state), AdamW + a scheduler, preemption, resume. ``--step-delay``
slows steps down so a test can signal a run in the middle (it changes no numbers).

    torchrun --nproc_per_node 2 tests/integration/runtime_toy_train.py --plan P --job-dir D
"""

from __future__ import annotations

import itertools
import os
import time

import torch
from torch.utils.data import TensorDataset

from gputrain.train.runtime import RunContext, run_entrypoint


def train(ctx: RunContext) -> int:
    delay = float(ctx.args[ctx.args.index("--step-delay") + 1]) if "--step-delay" in ctx.args else 0.0
    (ctx.job_dir / f"pid_rank{ctx.rank}").write_text(str(os.getpid()))
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 8, generator=gen)
    y = (x @ torch.randn(8, 1, generator=gen)).squeeze(1) + 0.1 * torch.randn(256, generator=gen)
    data = TensorDataset(x, y)
    train = ctx.recipe.train
    loader, sampler = ctx.make_loader(data, train.batch_size)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    model = ctx.wrap_ddp(net.to(ctx.device))
    ctx.seed_per_rank()
    opt = torch.optim.AdamW(model.parameters(), lr=train.learning_rate)
    epochs = train.epochs or 3
    total = epochs * len(loader)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    state: dict = {"model": model, "optimizer": opt, "scheduler": sched, "scaler": ctx.scaler, "pos": {}}
    step, epoch, skip = 0, 0, 0
    ckpt = ctx.checkpoints.restore(state)
    if ckpt is not None:
        step, epoch, skip = ckpt.step, ckpt.state["pos"]["epoch"], ckpt.state["pos"]["batch"]
        ctx.print0(f"resumed from step {step}")
    save_every = train.save_every or 0
    while epoch < epochs:
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(itertools.islice(loader, skip, None), start=skip):
            with ctx.autocast():
                loss = torch.nn.functional.mse_loss(model(xb.to(ctx.device)).squeeze(1), yb.to(ctx.device))
            ctx.optimizer_step(loss, opt, model.parameters())
            sched.step()
            step += 1
            mean = ctx.all_reduce_mean(loss=loss.item())
            ctx.metrics.log(step, loss=mean["loss"], lr=sched.get_last_lr()[0], epoch=epoch)
            state["pos"] = {"epoch": epoch, "batch": i + 1}
            if delay:
                time.sleep(delay)
            if ctx.should_stop():
                ctx.exit_for_requeue(step, state)
            if save_every and step % save_every == 0:
                ctx.checkpoints.save(step, state)
        epoch, skip = epoch + 1, 0
    if ctx.is_main:
        torch.save(net.state_dict(), ctx.job_dir / "final.pt")
    ctx.write_json("result.json", {"steps": step, "world_size": ctx.world_size})
    return 0


if __name__ == "__main__":
    run_entrypoint(train)
