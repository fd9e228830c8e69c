"""Step models of the diffusion (bd3lm, hdp), GNN (gnn_coloring) and selftest entrypoints.

- Diffusion: BD3-LM trains on ``x_t ⊕ x_0`` (the transformer sees twice the sequence; the loss and the
  output head only the noised half); HDP feeds the noised plan and execution next to the clean question,
  plan and execution. With SDPA the block mask is applied to a dense score matrix (every pair computed);
  FlexAttention skips the masked blocks (about three quarters).
- GNN: per graph, ``L`` message-passing layers over ``n`` nodes and ``E`` directed edges (message ``h×h``,
  update ``2h×h``, a scatter-add per edge) plus a per-step floor: eager operator dispatch (forward,
  backward, clipping, AdamW: 129 + 73·L ATen operators per step, counted with ``TorchDispatchMode`` on the
  real model with foreach optimizers as on CUDA) and collating the batch's graphs on the host (in
  parallel with the step when ``train.num_workers`` > 0). For graphs of ~100 nodes the floor is the step:
  the FLOPs are microseconds on any GPU. Per epoch: a validation pass, a checkpoint, and the loaders'
  worker processes started again (train and validation; the loaders are not persistent). Every rank builds
  the whole data set before training (generation is a pure function of the seed).
"""

from __future__ import annotations

import math

from gputrain.contract.vocab import padded_vocab
from gputrain.planner import physics
from gputrain.planner.kernels import diffusion_loss_kernel, plan_kernels
from gputrain.planner.workload import CHECKPOINT_BYTES_PER_S, Hardware, StepModel, global_batch, startup_seconds
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.recipe.entrypoints import entrypoint_of
from gputrain.recipe.schema import Recipe

#: torch.compile of the transformer blocks and the first step's warm-up, charged once as start-up (seconds):
#: the regional compile of one DiT block, forward and backward, plus FlexAttention's kernels
COMPILE_SECONDS = 60.0
#: host time to collate one small graph into a batch (tensor concatenation, index offsets), seconds
COLLATE_SECONDS_PER_GRAPH = 1e-4  # measured here: collate() of 64 default graphs, 94 µs each
#: generating and featurising one ~60-node graph (networkx, Python), seconds
GRAPH_SECONDS = 3.3e-3  # measured here: build_graphs() at the default 20-100 nodes, 3.2 ms CPU time each
#: ATen operators of one training step: fixed part and per message-passing layer (counted, see docstring)
GNN_OPS_FIXED, GNN_OPS_PER_LAYER = 129, 73
#: starting a non-persistent DataLoader's workers (fork, first batch), seconds per epoch and loader
LOADER_START_SECONDS = 0.25  # measured here: 0.55 s for 4 workers under a load average of 12 on 2 cores
#: the report (network decode, network- and random-seeded Tabucol q-searches, DSATUR) per graph and per
#: allowed search move, seconds: measured here, report() at the B200 recipe's settings (200 test graphs +
#: 13 benchmarks, 10 000 moves) with an untrained network took 127 s of CPU time
REPORT_SECONDS_PER_GRAPH_MOVE = 6.0e-5


def diffusion_tokens(recipe: Recipe) -> tuple[int, int]:
    """(tokens the transformer sees, tokens with a loss and an output head) per sample."""
    algo = recipe.algorithm
    seq = recipe.model.seq_len or 0
    if entrypoint_of(recipe.entrypoint).hierarchical and isinstance(algo, DiffusionAlgorithm):
        noised = algo.plan_len + algo.exec_len
        return noised + algo.hdp_length, noised
    return 2 * seq, seq


#: measured efficiency (model FLOPs as ``diffusion_flops_per_sample`` counts them / dense bf16 peak) per
#: (attention kernel, compiled, head + loss path), from *benchmark* rows only (benchmarks/diffusion_mfu.py,
#: 12 × 768, seq 1024, batch 32, H200): the eager loss from the 2026-11-26 sheet
#: (../shared/reference/gpu-h200-2026-11-26.md), the compiled loss (with ``shared_modulation``, the defaults
#: since #27) from the 2026-11-27 suite's bench_fast row, 0.1315 s = 40.0 % (benchmarks/RESULTS.md). The
#: ``gputrain run`` rows are the held-out check (benchmarks/PLANNER.md). A loss path not measured takes its
#: attention path's eager-loss figure; an attention path not measured, SDPA eager's.
DIFFUSION_EFFICIENCY = {("sdpa", False, "torch"): 0.168, ("flex", True, "torch"): 0.325,
                        ("flex", True, "compiled"): 0.400}
DIFFUSION_EFFICIENCY_FALLBACK = ("sdpa", False, "torch")


def diffusion_flops_per_sample(recipe: Recipe) -> tuple[float, int, float]:
    """(training FLOPs of one sample, tokens the transformer sees, rows through the output head).

    The count ``benchmarks/diffusion_mfu.py`` and the trainer's MFU use: ``6·body`` per processed token,
    ``6·D·V`` per masked row (the head reads only the masked noised tokens: on average the share (β+ω)/2 of
    the noised ones), dense attention ``12·L·D·S²`` (counted dense whatever the kernel skips: the measured
    efficiency of each kernel absorbs what it saves)."""
    model = recipe.model
    fed, loss_tokens = diffusion_tokens(recipe)
    params = physics.params_of(model)
    d, layers = model.hidden_size or 0, model.num_layers or 0
    head = padded_vocab(model.vocab_size or 0) * d  # the GEMM runs at the padded width
    body = max(0.0, params - head)
    algo = recipe.algorithm
    masked = loss_tokens * ((algo.clip_beta + algo.clip_omega) / 2 if isinstance(algo, DiffusionAlgorithm) else 0.5)
    flops = 6 * body * fed + 6 * head * masked + 12 * layers * d * fed * fed
    return flops * (4 / 3 if recipe.train.gradient_checkpointing else 1.0), fed, masked


def diffusion_efficiency(recipe: Recipe, hw: Hardware) -> tuple[float, str]:
    """(efficiency, where it came from): the user's ``estimate.mfu`` when set, else the measured figure of
    the kernel path the resolver picks for this GPU."""
    if "mfu" in recipe.estimate.model_fields_set and recipe.estimate.mfu:
        return float(recipe.estimate.mfu), f"{recipe.estimate.mfu:.1%} MFU assumed (estimate.mfu)"
    choice = plan_kernels(recipe, hw.gpu)
    loss = diffusion_loss_kernel(recipe, choice, hw.gpu)
    path = (choice.attention, choice.compile, loss) if choice else DIFFUSION_EFFICIENCY_FALLBACK
    label = f"{path[0]}{' + compile' if path[1] else ' eager'}" + (f", {loss} loss" if loss != "torch" else "")
    if path in DIFFUSION_EFFICIENCY:
        eff = DIFFUSION_EFFICIENCY[path]
        return eff, f"{eff:.1%} MFU measured for {label} (H200 benchmark)"
    eager_loss = (path[0], path[1], "torch")
    if eager_loss in DIFFUSION_EFFICIENCY:
        eff = DIFFUSION_EFFICIENCY[eager_loss]
        return eff, f"{eff:.1%} MFU (the eager loss's; {label} not measured)"
    eff = DIFFUSION_EFFICIENCY[DIFFUSION_EFFICIENCY_FALLBACK]
    return eff, f"{eff:.1%} MFU (SDPA eager's, {label} not measured)"


def diffusion(recipe: Recipe, hw: Hardware) -> StepModel:
    model = recipe.model
    per_sample, fed, masked = diffusion_flops_per_sample(recipe)
    _, loss_tokens = diffusion_tokens(recipe)
    samples = global_batch(recipe, hw.world)
    eff, eff_note = diffusion_efficiency(recipe, hw)
    choice = plan_kernels(recipe, hw.gpu)
    out = StepModel("diffusion", flops=per_sample * samples, efficiency=eff)
    out.phases["compute"] = out.flops / hw.world / (hw.peak * eff)
    compiled = bool(choice and choice.compile)
    micro_steps = recipe.train.grad_accum
    if not compiled:  # compiled blocks launch fused kernels: the host keeps ahead of the GPU
        out.phases["dispatch"] = micro_steps * 3 * 30 * (model.num_layers or 1) * hw.op_seconds
    steps = recipe.train.max_steps or 0
    evals = steps // recipe.train.eval_every if recipe.train.eval_every else 0
    algo = recipe.algorithm
    eval_batches = 0
    if isinstance(algo, DiffusionAlgorithm):
        eval_batches = algo.eval_batches + (len(algo.clip_search_widths) * algo.clip_search_batches
                                            if algo.clip_search else 0)
    eval_eff = DIFFUSION_EFFICIENCY[DIFFUSION_EFFICIENCY_FALLBACK]  # evaluation runs the EMA weights eagerly
    per_batch = per_sample / 3 * recipe.train.batch_size / (hw.peak * eval_eff)
    compile_seconds = COMPILE_SECONDS if compiled else 0.0
    out.overhead_seconds = startup_seconds(hw) + compile_seconds + evals * eval_batches * per_batch
    layout = "noised P+E next to clean Q+P+E" if entrypoint_of(recipe.entrypoint).hierarchical else "x_t ⊕ x_0"
    path = f"kernels: {choice.label()} ({choice.reason})" if choice else "kernels: sdpa (eager)"
    out.assumptions.append(
        f"diffusion: the transformer sees {fed} tokens per sample ({layout}), loss on {loss_tokens}, head on "
        f"~{masked:.0f} masked; {path}; {samples} samples per step at {eff_note}"
        + (f"; start-up includes ~{COMPILE_SECONDS:.0f} s of compile + warm-up" if compiled else ""))
    return out


def _graph_shape(algo: GNNColoringAlgorithm) -> tuple[float, float]:
    """(mean nodes, mean directed edges) of a generated training graph, generators mixed evenly."""
    n = (algo.min_nodes + algo.max_nodes) / 2
    degrees = []
    for kind in algo.generators:
        if kind == "planted":
            k = sum(algo.planted_colors) / 2
            degrees.append(sum(algo.planted_edge_prob) / 2 * n * (1 - 1 / k))
        else:
            degrees.append(sum(algo.er_avg_degree) / 2)
    return n, n * sum(degrees) / len(degrees)


def gnn(recipe: Recipe, hw: Hardware) -> StepModel:
    algo = recipe.algorithm
    assert isinstance(algo, GNNColoringAlgorithm)
    h, layers = recipe.model.hidden_size or 64, recipe.model.num_layers or 1
    nodes, edges = _graph_shape(algo)
    features = algo.num_colors + algo.random_features + 4
    per_graph = nodes * (2 * features * h + 2 * h * h + layers * 6 * h * h + 2 * h * algo.num_colors)
    per_graph += edges * layers * h
    batch = recipe.train.batch_size
    out = StepModel("gnn", flops=3 * per_graph * batch * hw.world)
    out.phases["compute"] = 3 * per_graph * batch / (hw.peak * recipe.estimate.mfu)
    ops = GNN_OPS_FIXED + GNN_OPS_PER_LAYER * layers + (2 if hw.world > 1 else 0)
    out.phases["dispatch"] = ops * hw.op_seconds
    workers = recipe.train.num_workers
    collate = batch * COLLATE_SECONDS_PER_GRAPH
    if workers:  # collated ahead by the workers: on the step's path only where it outlasts the step
        collate = max(0.0, collate / workers - out.phases["compute"] - out.phases["dispatch"])
    out.phases["data"] = collate
    train_graphs = recipe.data.train_size or 0
    val_graphs = recipe.data.val_size or 0
    epochs = recipe.train.epochs or 1
    val_batches = math.ceil(val_graphs / (batch * hw.world)) if val_graphs else 0
    val_seconds = epochs * val_batches * (out.phases["compute"] / 3 + out.phases["dispatch"] / 3 + out.phases["data"])
    per_epoch = (2 * LOADER_START_SECONDS if workers else 0.0) + 16 * physics.params_of(recipe.model) / \
        CHECKPOINT_BYTES_PER_S
    generate = (train_graphs + val_graphs) * GRAPH_SECONDS * nodes / 60
    report_graphs = algo.eval_graphs + len(algo.benchmarks)
    report = report_graphs * algo.search_moves * REPORT_SECONDS_PER_GRAPH_MOVE
    report += algo.eval_graphs * GRAPH_SECONDS * nodes / 60
    out.overhead_seconds = (startup_seconds(hw) + val_seconds + epochs * per_epoch + generate + report
                            + (5.0 if algo.onnx_export else 0.0))
    out.assumptions.append(
        f"GNN: ~{nodes:.0f} nodes and ~{edges:.0f} directed edges per graph, {batch} graphs per GPU per step; "
        f"floor per step: {ops} eager operators and collating {batch} graphs"
        f"{f' (by {workers} loader workers, alongside the step)' if workers else ''}; run overhead: start-up, "
        f"{epochs} × (validation, checkpoint{', loader workers restarted twice' if workers else ''}), every rank "
        f"generating {train_graphs + val_graphs} graphs (~{generate:.0f} s), rank 0's report on {report_graphs} "
        f"graphs (Tabucol searches of up to {algo.search_moves} moves, ~{report:.0f} s), ONNX export")
    return out


def selftest(recipe: Recipe, hw: Hardware) -> StepModel:
    out = StepModel("selftest")
    out.phases["collectives"] = 0.5
    out.overhead_seconds = startup_seconds(hw)
    out.assumptions.append("selftest: a few all-reduces; start-up dominates")
    return out
