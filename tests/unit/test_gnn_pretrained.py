"""The colouring network's safetensors export loads back into the same network: same logits, same colours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gputrain.errors import GputrainError
from gputrain.train.gnn_coloring.graphs import benchmark, featurize
from gputrain.train.gnn_coloring.model import ColoringGNN
from gputrain.train.gnn_coloring.pretrained import export_safetensors, load_pretrained


def test_exported_network_gives_the_same_logits_and_colours(tmp_path: Path) -> None:
    chromatic_head = True  # the optional head too: a config that dropped it would fail strict loading
    torch.manual_seed(0)
    net = ColoringGNN(in_dim=2 + 4, hidden=16, layers=3, num_colors=8, dropout=0.2, chromatic_head=chromatic_head)
    net.train()  # exported from training mode, as the trainer's network is
    out = export_safetensors(net, 4, tmp_path, {"steps": 3})
    net.eval()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert not list(tmp_path.glob(".model*"))
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden"], config["layers"], config["num_colors"], config["steps"]) == (16, 3, 8, 3)
    assert config["features"]["random_features"] == 4

    loaded = load_pretrained(out)
    assert not loaded.training and loaded.chi_head is not None
    graph = featurize(benchmark("myciel4"), 8, 4, 7)
    assert graph.x is not None
    with torch.no_grad():
        want, got = net(graph.x, graph.edge_index()), loaded(graph.x, graph.edge_index())
    assert torch.equal(got, want)  # fp32, bit for bit
    assert torch.equal(got.argmax(1), want.argmax(1))  # the same colours
    node_graph = torch.zeros(graph.num_nodes, dtype=torch.long)
    with torch.no_grad():
        assert torch.equal(loaded(graph.x, graph.edge_index(), node_graph, 1)[1],
                           net(graph.x, graph.edge_index(), node_graph, 1)[1])


def test_loading_something_else_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GputrainError, match="not a colouring-network export"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"format": "gputrain-block-diffusion", "version": 1}))
    with pytest.raises(GputrainError, match="expected 'gputrain-coloring-gnn'"):
        load_pretrained(tmp_path)
