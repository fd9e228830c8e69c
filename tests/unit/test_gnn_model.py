"""Potts loss, decoding/repair and the ONNX export (dynamo exporter, dynamic N and E)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gputrain.train.gnn_coloring import decode  # noqa: E402
from gputrain.train.gnn_coloring.graphs import Graph, benchmark, collate, erdos_renyi, featurize  # noqa: E402
from gputrain.train.gnn_coloring.model import ColoringGNN, masked_probs, potts_loss  # noqa: E402


def _batch(names: list[str]):
    return collate([featurize(benchmark(n), 8, 4, i) for i, n in enumerate(names)])


def test_potts_loss_is_one_over_q_for_uniform_and_zero_for_proper_colouring() -> None:
    batch = _batch(["myciel3", "queen5_5"])
    n = batch.x.shape[0]
    uniform, per_graph = potts_loss(torch.zeros(n, 8), batch.edge_index, batch.node_graph, batch.q, 2)
    assert torch.allclose(per_graph, torch.tensor([1 / 4, 1 / 5]))
    assert torch.isclose(uniform, torch.tensor((1 / 4 + 1 / 5) / 2))
    # queen5_5 has a proper 5-colouring: colour (r, c) with (r + 2c) mod 5.
    q5 = collate([featurize(benchmark("queen5_5"), 8, 4, 0)])
    colours = torch.tensor([(r + 2 * c) % 5 for r in range(5) for c in range(5)])
    logits = torch.nn.functional.one_hot(colours, 8).float() * 50
    loss, _ = potts_loss(logits, q5.edge_index, q5.node_graph, q5.q, 1)
    assert float(loss) < 1e-6


def test_potts_loss_is_invariant_to_relabelling_colours() -> None:
    batch = _batch(["myciel4"])
    logits = torch.randn(batch.x.shape[0], 8)
    perm = torch.tensor([3, 0, 4, 1, 2, 5, 6, 7])  # permutes the first q=5 colours among themselves
    a, _ = potts_loss(logits, batch.edge_index, batch.node_graph, batch.q, 1)
    b, _ = potts_loss(logits[:, perm], batch.edge_index, batch.node_graph, batch.q, 1)
    assert torch.allclose(a, b)


def test_masked_probs_give_zero_beyond_the_budget() -> None:
    p = masked_probs(torch.randn(3, 6), torch.tensor([2, 3, 6]))
    assert torch.allclose(p.sum(-1), torch.ones(3))
    assert float(p[0, 2:].sum()) == 0.0 and float(p[1, 3:].sum()) == 0.0


def test_repair_removes_conflicts_and_complete_gives_proper_colouring() -> None:
    g = benchmark("myciel5")
    rng = np.random.default_rng(0)
    probs = rng.random((g.num_nodes, g.q))
    start = probs.argmax(1)
    adj = decode.neighbours(g)
    repaired = decode.repair(probs, adj, start, g.q, rounds=10)
    assert decode.conflicts(g, repaired) < decode.conflicts(g, start)
    assert repaired.max() < g.q
    proper = decode.complete(adj, repaired)
    assert decode.conflicts(g, proper) == 0


def test_evaluate_and_summarize_compare_with_networkx() -> None:
    g = benchmark("myciel3")
    probs = np.full((g.num_nodes, 8), 1 / 4)
    probs[:, 4:] = 0
    r = decode.evaluate_graph(g, probs, rounds=0)
    assert r.conflicts_argmax == r.conflicts_repaired == 20  # all colour 0: every edge in conflict
    assert r.colours_dsatur == 4 and r.colours_gnn >= 4
    s = decode.summarize([r])
    assert s["conflicts_per_edge_argmax"] == 1.0
    assert s["random_conflicts_per_edge"] == 0.25
    assert s["colours_minus_ref_dsatur"] == 0.0
    assert s["zero_conflict_share"] == 0.0


def test_onnx_export_matches_torch_on_unseen_sizes(tmp_path: Path) -> None:
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    from gputrain.train.gnn_coloring.export import check_onnx, export_onnx

    torch.manual_seed(0)
    model = ColoringGNN(in_dim=6, hidden=16, layers=3, num_colors=8).eval()
    example = featurize(benchmark("myciel3"), 8, 4, 0)
    path = tmp_path / "model.onnx"
    export_onnx(model, example.x, example.edge_index(), path)
    big = featurize(benchmark("queen8_8"), 8, 4, 1)  # many duplicate destinations per node
    assert check_onnx(model, path, big.x, big.edge_index()) <= 1e-4
    rng = np.random.default_rng(3)
    lonely = Graph("lonely", "erdos_renyi", 37, erdos_renyi(30, 0.1, rng), q=3, chi=None)  # 7 isolated nodes
    lonely = featurize(lonely, 8, 4, 2)
    assert check_onnx(model, path, lonely.x, lonely.edge_index()) <= 1e-4
    with torch.no_grad():
        out = model(big.x, big.edge_index())
    assert out.shape == (64, 8) and torch.isfinite(out).all()


def test_chromatic_head_loss_runs_through_the_wrapper_forward() -> None:
    """DDP syncs gradients only for a forward made through the wrapper; the χ head must not bypass it."""
    from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
    from gputrain.train.gnn_coloring.train import batch_loss

    class CountingWrapper(torch.nn.Module):  # unwrap() sees through ``_orig_mod`` like through DDP
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self._orig_mod, self.calls = inner, 0

        def forward(self, *args: object) -> object:
            self.calls += 1
            return self._orig_mod(*args)

    torch.manual_seed(0)
    net = ColoringGNN(in_dim=6, hidden=16, layers=2, num_colors=8, chromatic_head=True)
    wrapped = CountingWrapper(net)
    algo = GNNColoringAlgorithm(num_colors=8, chromatic_head=True).model_dump(mode="json")
    loss, parts = batch_loss(wrapped, _batch(["myciel3", "queen5_5"]), algo)
    assert wrapped.calls == 1
    assert {"potts", "chi_loss"} <= set(parts) and torch.isfinite(loss)
    loss.backward()
    assert net.chi_head is not None and net.chi_head.weight.grad is not None
