"""The training loop: DDP over generated graphs, Potts loss, best model by validation loss, report, ONNX.

Reads top to bottom: build data → model → resume → epochs (log, preempt, checkpoint, validate) → rank 0
evaluates the best weights on held-out test and benchmark graphs (``evaluate``), writes ``result.json``
and ``model.onnx`` (``export``).
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import torch

from gputrain.contract import phases
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.train.gnn_coloring.evaluate import report
from gputrain.train.gnn_coloring.export import export_and_check
from gputrain.train.gnn_coloring.graphs import Batch, Graph, collate, feature_dim, featurize, generate
from gputrain.train.gnn_coloring.model import ColoringGNN, potts_loss
from gputrain.train.gnn_coloring.pretrained import export_safetensors
from gputrain.train.runtime import RunContext, required
from gputrain.train.runtime.checkpoint import atomic_torch_save, unwrap
from gputrain.train.runtime.schedule import lr_factor

BEST_FILE = "best_model.pt"


def build_graphs(algo: dict[str, Any], split: str, count: int) -> list[Graph]:
    num_colors, rf, seed = int(algo["num_colors"]), int(algo["random_features"]), int(algo["graph_seed"])
    return [
        featurize(generate(algo, split, i), num_colors, rf, seed * 1_000_003 + i * 2 + (split == "val"))
        for i in range(count)
    ]


def batch_loss(model: torch.nn.Module, batch: Batch, algo: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    bare = unwrap(model)
    if bare.chi_head is None:
        logits = model(batch.x, batch.edge_index)
        loss, _ = potts_loss(logits, batch.edge_index, batch.node_graph, batch.q, batch.num_graphs)
        return loss, {}
    logits, pred = model(batch.x, batch.edge_index, batch.node_graph, batch.num_graphs)
    potts, _ = potts_loss(logits, batch.edge_index, batch.node_graph, batch.q, batch.num_graphs)
    known = ~torch.isnan(batch.chi)
    target = torch.where(known, batch.chi, batch.q.float())  # planted/ER: q bounds χ from above
    chi_loss = torch.nn.functional.smooth_l1_loss(pred.float(), target)
    loss = potts + float(algo["chromatic_weight"]) * chi_loss
    return loss, {"potts": float(potts.detach()), "chi_loss": float(chi_loss.detach())}


@torch.no_grad()
def validate(ctx: RunContext, model: torch.nn.Module, loader: Any, algo: dict[str, Any]) -> float:
    model.eval()
    total, count = 0.0, 0.0
    for batch in loader:
        batch = batch.to(ctx.device)
        with ctx.autocast():
            loss, parts = batch_loss(model, batch, algo)
        total += parts.get("potts", float(loss)) * batch.num_graphs  # validation loss = the Potts term
        count += batch.num_graphs
    model.train()
    sums = ctx.all_reduce_mean(total=total, count=count)
    return sums["total"] / max(sums["count"], 1.0)


def train(ctx: RunContext) -> int:
    settings = ctx.algorithm(GNNColoringAlgorithm)
    algo = settings.model_dump(mode="json")
    recipe = ctx.recipe
    train_spec = recipe.train
    t0 = time.time()
    train_set = build_graphs(algo, "train", required(recipe.data.train_size, "data.train_size"))
    val_set = build_graphs(algo, "val", required(recipe.data.val_size, "data.val_size"))
    ctx.print0(f"[gnn] {len(train_set)} train / {len(val_set)} val graphs built in {time.time() - t0:.1f}s")

    batch_size = train_spec.batch_size
    loader, sampler = ctx.make_loader(train_set, batch_size, collate_fn=collate)
    val_loader = ctx.make_eval_loader(val_set, batch_size, collate_fn=collate)
    net = ColoringGNN(
        feature_dim(int(algo["random_features"])),
        required(recipe.model.hidden_size, "model.hidden_size"),
        required(recipe.model.num_layers, "model.num_layers"),
        int(algo["num_colors"]),
        float(algo["dropout"]),
        bool(algo["chromatic_head"]),
    ).to(ctx.device)
    ctx.print0(f"[gnn] parameters: {sum(p.numel() for p in net.parameters()):,}")
    wrapped = ctx.wrap_ddp(net)
    model = ctx.compile(wrapped)
    compiling = model is not wrapped  # torch.compile runs in the first step: announced as a phase (#31)
    ctx.seed_per_rank()
    opt = torch.optim.AdamW(
        net.parameters(),
        lr=train_spec.learning_rate,
        weight_decay=train_spec.weight_decay,
    )
    steps_per_epoch = len(loader)
    epochs = train_spec.epochs or math.ceil((train_spec.max_steps or 0) / max(1, steps_per_epoch))
    total = epochs * steps_per_epoch
    if train_spec.max_steps:
        total = min(total, train_spec.max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_factor(train_spec.lr_schedule, train_spec.warmup_steps, total)
    )
    state: dict[str, Any] = {
        "model": model,
        "optimizer": opt,
        "scheduler": sched,
        "scaler": ctx.scaler,
        "pos": {"epoch": 0, "batch": 0},
        "best": {"val_loss": float("inf"), "step": 0},
    }
    step, epoch, skip = 0, 0, 0
    ckpt = ctx.checkpoints.restore(state, map_location=ctx.device)
    if ckpt is not None:
        step, epoch, skip = ckpt.step, ckpt.state["pos"]["epoch"], ckpt.state["pos"]["batch"]
        state["best"] = ckpt.state["best"]
        # The loop's own record of where it is: a checkpoint taken after an epoch's last batch (before its
        # validation) resumes into that epoch's end, not into an endless empty epoch.
        state["pos"] = {"epoch": epoch, "batch": skip}
        ctx.print0(f"[gnn] resumed from step {step} (epoch {epoch}, batch {skip})")
    log_every, save_every = train_spec.log_every, train_spec.save_every or 0
    window_graphs, window_start = 0, time.time()

    while epoch < epochs and step < total:
        sampler.set_epoch(epoch)
        for i, batch in enumerate(itertools.islice(loader, skip, None), start=skip):
            batch = batch.to(ctx.device)
            if compiling:
                ctx.print0(phases.start_line("first step (torch.compile)"))
                compile_tic = time.perf_counter()
            with ctx.autocast():
                loss, parts = batch_loss(model, batch, algo)
            grad_norm = ctx.optimizer_step(loss, opt, net.parameters())
            if compiling:
                ctx.print0(phases.end_line("first step (torch.compile)", time.perf_counter() - compile_tic))
                compiling = False
            sched.step()
            step += 1
            window_graphs += batch.num_graphs
            state["pos"] = {"epoch": epoch, "batch": i + 1}
            if step % log_every == 0 or step == total:
                mean = ctx.all_reduce_mean(loss=float(loss.detach()), graphs=float(window_graphs), **parts)
                gps = mean.pop("graphs") * ctx.world_size / max(time.time() - window_start, 1e-9)
                ctx.metrics.log(
                    step,
                    epoch=epoch + (i + 1) / len(loader),
                    lr=sched.get_last_lr()[0],
                    grad_norm=grad_norm,
                    samples_per_s=gps,
                    **mean,
                )
                ctx.print0(
                    f"[gnn] step {step}/{total} epoch {epoch} loss {mean['loss']:.4f} "
                    f"grad_norm {grad_norm:.3f} graphs/s {gps:.0f}"
                )
                window_graphs, window_start = 0, time.time()
            if ctx.should_stop():
                ctx.exit_for_requeue(step, state)
            if save_every and step % save_every == 0:
                ctx.checkpoints.save(step, state)
            if step >= total:
                break
        seen = state["pos"]["batch"]
        if seen >= len(loader):  # a whole epoch: a resume from the save below starts the next one
            epoch, skip = epoch + 1, 0
            state["pos"] = {"epoch": epoch, "batch": 0}
        # else train.max_steps ended the epoch early: the save keeps the position, so a resume with a larger
        # max_steps trains the rest of this epoch instead of skipping it
        val_loss = validate(ctx, model, val_loader, algo)
        improved = val_loss < state["best"]["val_loss"]
        if improved:
            state["best"] = {"val_loss": val_loss, "step": step}
            if ctx.is_main:
                atomic_torch_save(net.state_dict(), ctx.job_dir / BEST_FILE)
        at = float(epoch) if state["pos"]["batch"] == 0 else epoch + seen / len(loader)
        ctx.metrics.log(step, val_loss=val_loss, epoch=at)
        ctx.print0(f"[gnn] epoch {at:g} val_loss {val_loss:.4f}{' (best)' if improved else ''}")
        ctx.checkpoints.save(step, state)
        if state["pos"]["batch"]:
            break
    return finish(ctx, net, val_set, algo, state["best"], step)


def finish(
    ctx: RunContext, net: ColoringGNN, val: list[Graph], algo: dict[str, Any], best: dict[str, Any], step: int
) -> int:
    """Rank 0: best weights → report + ONNX; the others wait at the closing barrier."""
    if not ctx.is_main:
        return 0
    best_path = ctx.job_dir / BEST_FILE
    if best_path.is_file():
        net.load_state_dict(torch.load(best_path, map_location=ctx.device, weights_only=True))
    settings = GNNColoringAlgorithm.model_validate(algo)
    result: dict[str, Any] = {"steps": step, "best_val_loss": best["val_loss"], "best_step": best["step"]}
    with ctx.phase("GNN report (held-out families, benchmark graphs, searches)"):
        result.update(report(net, settings, ctx.device))
    if settings.onnx_export:
        with ctx.phase("ONNX export and onnxruntime check"):
            result["onnx"] = export_and_check(net, val[0], settings, ctx.job_dir)
    out = export_safetensors(net, settings.random_features, ctx.job_dir, {"steps": step, "weights": "best_val_loss",
                                                                          "best_step": best["step"]})
    result["export"] = {"path": out.name, "format": "safetensors",
                        "loader": "gputrain.train.gnn_coloring.pretrained.load_pretrained"}
    test = result["summary"]["test"]
    ctx.metrics.log(
        step,
        conflicts_per_edge=test["network_conflicts_per_edge"],
        network_proper_share=test["network_proper_share"],
    )
    ctx.write_json("result.json", result)
    ctx.print0(f"[gnn] wrote {ctx.job_dir / 'result.json'}")
    return 0
