"""ONNX export of the colouring network with dynamic node and edge counts, checked with onnxruntime.

Uses the dynamo exporter (``dynamo=True``; the legacy one writes ``index_add_`` as a scatter without
reduction, so duplicate destinations overwrite each other: |Δ| up to 8 measured) and exports the sorted-segment
aggregation, so the graph has no ``ScatterND`` (``aggregate.py``). The check runs onnxruntime with its
default session options (all intra-op threads: where the scatter raced) several times on a graph of
``onnx_check_nodes`` nodes, a size the export never saw, with an isolated node, against torch's logits.
"""

from __future__ import annotations

import copy
import logging
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.train.gnn_coloring.graphs import Graph, featurize, sparse_random
from gputrain.train.gnn_coloring.model import ColoringGNN

#: The exporter's own noise, silenced by name around the export only (#31): its op registry logs one warning per
#: torchvision operator it skips when torchvision is absent (the GNN uses none), and torch's pytree warns that the
#: exporter itself still tests ``isinstance(treespec, LeafSpec)``. Any other warning or log line still shows.
_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"
_SKIPPED_TORCHVISION = "torchvision is not installed"
_LEAFSPEC_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropSkippedTorchvision(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_SKIPPED_TORCHVISION)


@contextmanager
def exporter_noise_silenced() -> Iterator[None]:
    """The two known lines of exporter noise dropped, nothing else."""
    logger = logging.getLogger(_REGISTRY_LOGGER)
    drop = _DropSkippedTorchvision()
    logger.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_LEAFSPEC_WARNING, category=FutureWarning)
            yield
    finally:
        logger.removeFilter(drop)


def export_onnx(model: ColoringGNN, example_x: torch.Tensor, example_ei: torch.Tensor, path: Path) -> None:
    with exporter_noise_silenced():
        _export_onnx(model, example_x, example_ei, path)


def _export_onnx(model: ColoringGNN, example_x: torch.Tensor, example_ei: torch.Tensor, path: Path) -> None:
    model = copy.deepcopy(model).cpu().float().eval()
    model.segment_aggregation = True  # no ScatterND in the graph (aggregate.py says why)
    nodes = torch.export.Dim("nodes", min=2)
    edges = torch.export.Dim("edges", min=2)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    program = torch.onnx.export(
        model,
        (example_x.cpu(), example_ei.cpu()),
        dynamo=True,
        input_names=["x", "edge_index"],
        output_names=["logits"],
        dynamic_shapes={"x": {0: nodes}, "edge_index": {1: edges}},
        verbose=False,
    )
    if program is None:
        raise GputrainError("ONNX export produced no program")
    program.save(str(tmp), external_data=False)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def check_onnx(model: torch.nn.Module, path: Path, x: torch.Tensor, edge_index: torch.Tensor, runs: int = 1) -> float:
    """Max |torch - onnxruntime| over ``runs`` runs of one default-options session (CPU, fp32)."""
    import onnxruntime as ort

    model = copy.deepcopy(model).cpu().float().eval()
    with torch.no_grad():
        expected = model(x.cpu(), edge_index.cpu()).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"x": x.cpu().numpy(), "edge_index": edge_index.cpu().numpy()}
    worst = 0.0
    for _ in range(runs):
        (got,) = session.run(["logits"], feed)
        worst = max(worst, float(np.max(np.abs(np.asarray(got) - expected))) if expected.size else 0.0)
    return worst


def check_graph(settings: GNNColoringAlgorithm, nodes: int) -> Graph:
    """A sparse random graph of ``nodes`` nodes (mean degree 8) whose last node has no edges."""
    edges = sparse_random(nodes - 1, 8.0, np.random.default_rng(12345))
    graph = Graph("onnx-check", "erdos_renyi", nodes, edges, q=min(5, settings.num_colors), chi=None)
    return featurize(graph, settings.num_colors, settings.random_features, 99)


def export_and_check(net: ColoringGNN, example: Graph, settings: GNNColoringAlgorithm, job_dir: Path) -> dict[str, Any]:
    """Write ``model.onnx`` and hold onnxruntime to torch; a mismatch is an error, not a warning."""
    path = job_dir / "model.onnx"
    assert example.x is not None
    t0 = time.time()
    export_onnx(net, example.x, example.edge_index(), path)
    graph = check_graph(settings, settings.onnx_check_nodes)
    assert graph.x is not None
    diff = check_onnx(net, path, graph.x, graph.edge_index(), runs=settings.onnx_check_runs)
    info = {
        "path": path.name,
        "max_abs_diff": diff,
        "check_nodes": graph.num_nodes,
        "check_edges": graph.num_edges,
        "check_runs": settings.onnx_check_runs,
        "seconds": round(time.time() - t0, 1),
    }
    print(
        f"[gnn] ONNX exported to {path}; onnxruntime (default session, {settings.onnx_check_runs} runs) "
        f"max |Δ| = {diff:.2e} on an unseen graph ({graph.num_nodes} nodes, {graph.num_edges} edges)",
        flush=True,
    )
    if not diff <= settings.onnx_tolerance:
        raise GputrainError(f"ONNX check failed: max |Δ| {diff:.3g} > {settings.onnx_tolerance}")
    return info
