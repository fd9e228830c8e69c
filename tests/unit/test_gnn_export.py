"""The exported colouring network equals torch under onnxruntime's default (multi-threaded) session.

onnxruntime's CPU ``ScatterND(reduction="add")`` races under its default intra-op thread pool (issues
#18048, #23396): an export of ``index_add_`` gave wrong, run-to-run different logits on large graphs. The
export now uses a sorted-segment aggregation with no scatter (``aggregate.py``).
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # each test needs the module's ONNX export of a real model: 6-10 s of set-up
torch = pytest.importorskip("torch")
if importlib.util.find_spec("onnxscript") is None:  # torch's exporter imports it (3 s): not at collection
    pytest.skip("onnxscript not installed", allow_module_level=True)
ort = pytest.importorskip("onnxruntime")

from gputrain.train.gnn_coloring.export import check_onnx, export_onnx  # noqa: E402
from gputrain.train.gnn_coloring.graphs import Graph, benchmark, erdos_renyi, featurize  # noqa: E402
from gputrain.train.gnn_coloring.model import ColoringGNN  # noqa: E402


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


_NOISE: dict[str, list[str]] = {}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[ColoringGNN, Path]:
    torch.manual_seed(0)
    model = ColoringGNN(in_dim=10, hidden=32, layers=4, num_colors=16).eval()
    example = featurize(benchmark("myciel3"), 16, 8, 0)
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    records = _Records()  # on torch's root logger: a record the exporter's own logger lets through reaches it
    logging.getLogger("torch").addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            export_onnx(model, example.x, example.edge_index(), path)
    finally:
        logging.getLogger("torch").removeHandler(records)
    _NOISE.update(logs=records.messages, warnings=[f"{w.category.__name__}: {w.message}" for w in caught])
    return model, path


def test_the_export_prints_no_torchvision_lines_and_no_leafspec_futurewarning(exported) -> None:
    """#31: four "torchvision is not installed" lines and torch's own FutureWarning on every GNN run."""
    assert not [m for m in _NOISE["logs"] if "torchvision" in m], _NOISE["logs"]
    assert not [w for w in _NOISE["warnings"] if "LeafSpec" in w], _NOISE["warnings"]


def _large_graph(n: int, seed: int) -> Graph:
    """n nodes, mean degree 8 (duplicate destinations everywhere), the last node isolated."""
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, n - 1, size=(4 * n, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    edges = np.unique(np.sort(pairs, axis=1), axis=0).astype(np.int64)
    return featurize(Graph("large", "erdos_renyi", n, edges, q=5, chi=None), 16, 8, seed)


def test_onnx_equals_torch_on_10000_nodes_in_20_runs_of_a_default_session(exported) -> None:
    model, path = exported
    graph = _large_graph(10_000, 1)
    with torch.no_grad():
        expected = model(graph.x, graph.edge_index()).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # default options
    feed = {"x": graph.x.numpy(), "edge_index": graph.edge_index().numpy()}
    diffs = [float(np.abs(session.run(["logits"], feed)[0] - expected).max()) for _ in range(20)]
    assert max(diffs) <= 1e-4, diffs


def test_exported_graph_has_no_scatter(exported) -> None:
    import onnx

    ops = {node.op_type for node in onnx.load(str(exported[1])).graph.node}
    assert not ops & {"ScatterND", "ScatterElements", "Scatter"}, ops
    assert "CumSum" in ops and "TopK" in ops


def test_onnx_matches_torch_on_unseen_sizes_isolated_nodes_and_no_edges(exported) -> None:
    model, path = exported
    big = featurize(benchmark("queen8_8"), 16, 8, 1)  # many duplicate destinations per node
    assert check_onnx(model, path, big.x, big.edge_index(), runs=2) <= 1e-4
    rng = np.random.default_rng(3)
    lonely = featurize(Graph("lonely", "erdos_renyi", 37, erdos_renyi(30, 0.1, rng), q=3, chi=None), 16, 8, 2)
    assert check_onnx(model, path, lonely.x, lonely.edge_index()) <= 1e-4  # 7 isolated nodes
    empty = featurize(Graph("empty", "erdos_renyi", 5, np.zeros((0, 2), dtype=np.int64), q=2, chi=None), 16, 8, 4)
    assert check_onnx(model, path, empty.x, empty.edge_index()) <= 1e-4
