"""The GNN's two aggregation forms: training speed, and the exported model under onnxruntime's default session.

    python benchmarks/gnn_aggregation.py                     # both parts, 10 000-node graph, 20 runs
    python benchmarks/gnn_aggregation.py --nodes 5000 --runs 30 --skip-train

Training: ms per step (forward, Potts loss, backward, AdamW) of the ``cpu`` profile's network (hidden 32,
4 layers, batches of 16 graphs of 12-40 nodes, one thread) with ``index_add_`` (what training uses) and
with the sorted-segment form (what the export uses), interleaved, medians of 7 rounds.
ONNX: the network exported with ``index_add_`` (``ScatterND(reduction="add")``: the export before), with
``scatter_add`` (``ScatterElements(reduction="add")``: the other scatter, correct in today's onnxruntime
only because its kernel happens to run on one thread) and as shipped (sorted segments, no scatter), each
run ``--runs`` times in one default-options onnxruntime session on a sparse random graph: runs off by
more than 1e-4 from torch, the worst |Δ|, and the median time per run.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import gputrain.train.gnn_coloring.model as model_module
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.train.gnn_coloring.aggregate import ScatterAggregator
from gputrain.train.gnn_coloring.export import check_graph, export_onnx
from gputrain.train.gnn_coloring.graphs import collate, feature_dim, featurize, generate
from gputrain.train.gnn_coloring.model import ColoringGNN, potts_loss


def train_step_ms(segment: bool, rounds: int = 7) -> list[float]:
    settings = GNNColoringAlgorithm(min_nodes=12, max_nodes=40, planted_colors=(3, 5))
    algo = settings.model_dump(mode="json")
    graphs = [featurize(generate(algo, "train", i), 16, 8, i) for i in range(128)]
    batches = [collate(graphs[i : i + 16]) for i in range(0, len(graphs), 16)]
    torch.manual_seed(0)
    net = ColoringGNN(feature_dim(8), 32, 4, 16)
    net.segment_aggregation = segment
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)

    def epoch() -> None:
        for b in batches:
            loss, _ = potts_loss(net(b.x, b.edge_index), b.edge_index, b.node_graph, b.q, b.num_graphs)
            opt.zero_grad()
            loss.backward()
            opt.step()

    epoch()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        epoch()
        out.append((time.perf_counter() - t0) / len(batches) * 1e3)
    return out


class ScatterElementsAggregator(ScatterAggregator):
    def neighbour_sum(self, h: torch.Tensor) -> torch.Tensor:
        index = self.dst.unsqueeze(1).expand(-1, h.shape[1])
        return torch.zeros_like(h).scatter_add(0, index, h.index_select(0, self.src))


def export_scatter(model: ColoringGNN, x: torch.Tensor, ei: torch.Tensor, path: Path) -> None:
    """The export with the training aggregation left in (``index_add_`` writes ScatterND(reduction=add))."""
    model = copy.deepcopy(model).eval()
    nodes, edges = torch.export.Dim("nodes", min=2), torch.export.Dim("edges", min=2)
    program = torch.onnx.export(
        model, (x, ei), dynamo=True, input_names=["x", "edge_index"], output_names=["logits"],
        dynamic_shapes={"x": {0: nodes}, "edge_index": {1: edges}}, verbose=False,
    )
    assert program is not None
    program.save(str(path), external_data=False)


def onnx_runs(path: Path, model: ColoringGNN, nodes: int, runs: int) -> dict[str, float]:
    import onnxruntime as ort

    graph = check_graph(GNNColoringAlgorithm(), nodes)
    assert graph.x is not None
    with torch.no_grad():
        expected = model(graph.x, graph.edge_index()).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"x": graph.x.numpy(), "edge_index": graph.edge_index().numpy()}
    diffs, times = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        (got,) = session.run(["logits"], feed)
        times.append(time.perf_counter() - t0)
        diffs.append(float(np.abs(got - expected).max()))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # where ScatterND is exact; a timing the machine's load disturbs less
    single = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    one_thread = []
    for _ in range(5):
        t0 = time.perf_counter()
        single.run(["logits"], feed)
        one_thread.append(time.perf_counter() - t0)
    return {
        "runs_off_by_more_than_1e-4": sum(d > 1e-4 for d in diffs),
        "max_abs_diff": max(diffs),
        "ms_per_run_median": round(statistics.median(times) * 1e3, 1),
        "ms_per_run_one_thread_median": round(statistics.median(one_thread) * 1e3, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--skip-train", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict[str, object] = {}
    if not args.skip_train:
        a, b, a2, b2 = train_step_ms(False), train_step_ms(True), train_step_ms(False), train_step_ms(True)
        out["train_ms_per_step_index_add"] = round(statistics.median(a + a2), 2)
        out["train_ms_per_step_sorted_segments"] = round(statistics.median(b + b2), 2)
    torch.manual_seed(0)
    model = ColoringGNN(feature_dim(8), 32, 4, 16).eval()
    example = check_graph(GNNColoringAlgorithm(), 40)
    assert example.x is not None
    with tempfile.TemporaryDirectory() as tmp:
        old, elements, new = (Path(tmp) / f"{name}.onnx" for name in ("nd", "elements", "segments"))
        export_scatter(model, example.x, example.edge_index(), old)
        training_form = model_module.ScatterAggregator
        model_module.ScatterAggregator = ScatterElementsAggregator  # type: ignore[misc]
        try:
            export_scatter(model, example.x, example.edge_index(), elements)
        finally:
            model_module.ScatterAggregator = training_form  # type: ignore[misc]
        export_onnx(model, example.x, example.edge_index(), new)
        out["onnx_scatter_nd"] = onnx_runs(old, model, args.nodes, args.runs)
        out["onnx_scatter_elements"] = onnx_runs(elements, model, args.nodes, args.runs)
        out["onnx_sorted_segments"] = onnx_runs(new, model, args.nodes, args.runs)
    out.update(nodes=args.nodes, runs=args.runs)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
