"""Potts loss, the two aggregation forms (training's index_add_, the export's sorted segments), the χ head."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gputrain.train.gnn_coloring.graphs import benchmark, collate, featurize  # noqa: E402
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


@pytest.mark.parametrize("n,m", [(1, 0), (5, 0), (37, 40), (400, 3000)])
def test_sorted_segment_sums_equal_index_add(n: int, m: int) -> None:
    """The exported aggregation (sorted segments, no scatter) computes what training's index_add_ does,
    with isolated nodes, duplicate destinations and no edges at all."""
    from gputrain.train.gnn_coloring.aggregate import ScatterAggregator, SortedSegmentAggregator, lower_bound

    gen = torch.Generator().manual_seed(n)
    edge_index = torch.randint(0, max(1, n - 2), (2, m), generator=gen)  # the last nodes stay isolated
    h = torch.randn(n, 8, generator=gen)
    scatter, segments = ScatterAggregator(edge_index, n), SortedSegmentAggregator(edge_index, n)
    assert torch.equal(scatter.degree(torch.float32), segments.degree(torch.float32))
    assert torch.allclose(scatter.neighbour_sum(h), segments.neighbour_sum(h), atol=1e-5)
    values = torch.sort(torch.randint(0, 50, (m,), generator=gen)).values
    queries = torch.arange(-1, 52)
    assert torch.equal(lower_bound(values, queries), torch.searchsorted(values, queries))


def test_model_output_does_not_depend_on_the_aggregation_form() -> None:
    torch.manual_seed(0)
    model = ColoringGNN(in_dim=6, hidden=16, layers=3, num_colors=8).eval()
    g = featurize(benchmark("queen8_8"), 8, 4, 1)
    with torch.no_grad():
        a = model(g.x, g.edge_index())
        model.segment_aggregation = True
        b = model(g.x, g.edge_index())
    assert torch.allclose(a, b, atol=1e-5)
    assert "segment_aggregation" not in "".join(model.state_dict())  # not a weight: checkpoints unchanged


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
