"""Step models of the diffusion (bd3lm, hdp), GNN (gnn_coloring) and selftest entrypoints.

- Diffusion: BD3-LM trains on ``x_t ⊕ x_0`` (the transformer sees twice the sequence; the loss and the
  output head only the noised half); HDP feeds the noised plan and execution next to the clean question,
  plan and execution. With SDPA the block mask is applied to a dense score matrix (every pair computed);
  FlexAttention skips the masked blocks (about three quarters).
- GNN: per graph, ``L`` message-passing layers over ``n`` nodes and ``E`` directed edges (message ``h×h``,
  update ``2h×h``, a scatter-add per edge) plus a per-step floor: eager operator dispatch (forward,
  backward, optimizer) and collating the batch's graphs on the host. For graphs of ~100 nodes the floor
  is the step: the FLOPs are microseconds on any GPU.
"""

from __future__ import annotations

import math

from gputrain.planner import physics
from gputrain.planner.workload import Hardware, StepModel, global_batch
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.recipe.schema import Recipe

#: host time to collate one small graph into a batch (tensor concatenation, index offsets), seconds
COLLATE_SECONDS_PER_GRAPH = 1e-4  # measured here: collate() of 64 default graphs, 94 µs each
#: generating and featurising one ~60-node graph (networkx, Python), seconds
GRAPH_SECONDS = 6e-3  # measured here: build_graphs() at the default 20-100 nodes, 5.9 ms each
#: one Tabucol move in the report's q-search (Python), seconds
TABUCOL_MOVE_SECONDS = 5e-6
#: process start, imports, device and process-group initialisation, seconds
STARTUP_SECONDS = {"gpu": 60.0, "cpu": 8.0}


def _startup(hw: Hardware) -> float:
    return STARTUP_SECONDS["cpu" if hw.gpu.is_cpu else "gpu"]


def diffusion_tokens(recipe: Recipe) -> tuple[int, int]:
    """(tokens the transformer sees, tokens with a loss and an output head) per sample."""
    algo = recipe.algorithm
    seq = recipe.model.seq_len or 0
    if recipe.entrypoint == "hdp" and isinstance(algo, DiffusionAlgorithm):
        noised = algo.plan_len + algo.exec_len
        return noised + algo.hdp_length, noised
    return 2 * seq, seq


def diffusion(recipe: Recipe, hw: Hardware) -> StepModel:
    model = recipe.model
    fed, loss_tokens = diffusion_tokens(recipe)
    params = physics.params_of(model)
    head = (model.vocab_size or 0) * (model.hidden_size or 0)
    body = max(0.0, params - head)
    dense_attention = recipe.train.attention != "flex"
    context = fed if dense_attention else fed / 4
    attn = 4 * (model.num_layers or 0) * (model.hidden_size or 0) * context * fed
    forward = 2 * body * fed + 2 * head * loss_tokens + attn
    ckpt = 4 / 3 if recipe.train.gradient_checkpointing else 1.0
    samples = global_batch(recipe, hw.world)
    out = StepModel("diffusion", flops=3 * ckpt * forward * samples)
    out.phases["compute"] = out.flops / hw.world / (hw.peak * recipe.estimate.mfu)
    micro_steps = recipe.train.grad_accum
    out.phases["dispatch"] = micro_steps * 3 * 30 * (model.num_layers or 1) * hw.op_seconds
    steps = recipe.train.max_steps or 0
    evals = steps // recipe.train.eval_every if recipe.train.eval_every else 0
    algo = recipe.algorithm
    eval_batches = 0
    if isinstance(algo, DiffusionAlgorithm):
        eval_batches = algo.eval_batches + (len(algo.clip_search_widths) * algo.clip_search_batches
                                            if algo.clip_search else 0)
    per_batch = forward * recipe.train.batch_size / (hw.peak * recipe.estimate.mfu)
    out.overhead_seconds = _startup(hw) + evals * eval_batches * per_batch
    layout = "x_t ⊕ x_0" if recipe.entrypoint != "hdp" else "noised P+E next to clean Q+P+E"
    masking = "dense scores under the block mask (SDPA)" if dense_attention else "FlexAttention skips masked blocks"
    out.assumptions.append(
        f"diffusion: the transformer sees {fed} tokens per sample ({layout}), loss/head on {loss_tokens}; "
        f"{masking}; {samples} samples per step at {recipe.estimate.mfu:.0%} MFU")
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
    ops = 3 * (4 + 8 * layers + 12) + 14 + (2 if hw.world > 1 else 0)
    out.phases["dispatch"] = ops * hw.op_seconds
    out.phases["data"] = batch * COLLATE_SECONDS_PER_GRAPH
    train_graphs = recipe.data.train_size or 0
    val_graphs = recipe.data.val_size or 0
    epochs = recipe.train.epochs or 1
    val_batches = math.ceil(val_graphs / (batch * hw.world)) if val_graphs else 0
    val_seconds = epochs * val_batches * (out.phases["compute"] / 3 + out.phases["dispatch"] / 3 + out.phases["data"])
    generate = (train_graphs + val_graphs + algo.eval_graphs) * GRAPH_SECONDS * nodes / 60
    report = len(algo.benchmarks) * 2 * 3 * algo.search_moves * TABUCOL_MOVE_SECONDS
    out.overhead_seconds = _startup(hw) + val_seconds + generate + report + (5.0 if algo.onnx_export else 0.0)
    out.assumptions.append(
        f"GNN: ~{nodes:.0f} nodes and ~{edges:.0f} directed edges per graph, {batch} graphs per GPU per step; "
        f"floor per step: {ops} eager operators and collating {batch} graphs; run overhead: start-up, "
        f"{epochs} validation passes, generating the graphs, the report's Tabucol search, ONNX export")
    return out


def selftest(recipe: Recipe, hw: Hardware) -> StepModel:
    out = StepModel("selftest")
    out.phases["collectives"] = 0.5
    out.overhead_seconds = _startup(hw)
    out.assumptions.append("selftest: a few all-reduces; start-up dominates")
    return out
