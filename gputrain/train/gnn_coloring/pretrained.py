"""The colouring network as safetensors + ``config.json``, beside the ONNX file (issue 29).

``model.onnx`` serves inference without torch; ``<job_dir>/model/`` holds the same best-validation weights
for torch users who fine-tune or inspect them: ``model.safetensors`` (the tensors, no pickle) and a
``config.json`` with the constructor arguments and the feature recipe the network expects (its input is
``featurize``'s: log degree, budget q / ``num_colors``, ``random_features`` Gaussian columns)::

    from gputrain.train.gnn_coloring.pretrained import load_pretrained
    net = load_pretrained("JOB/model")   # ColoringGNN in eval mode
    logits = net(x, edge_index)

Written to a temporary folder and renamed, so a crash never leaves a half-written model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gputrain.train.gnn_coloring.model import ColoringGNN
from gputrain.train.runtime.weights_folder import read_weights_config, write_weights_folder

MODEL_DIR = "model"
FORMAT = "gputrain-coloring-gnn"
VERSION = 1


def gnn_config(net: ColoringGNN, random_features: int) -> dict[str, Any]:
    """Constructor arguments read off the network itself (so the config cannot disagree with the weights)."""
    embed = net.embed[0]
    assert isinstance(embed, torch.nn.Linear)
    return {"format": FORMAT, "version": VERSION, "architecture": "ColoringGNN",
            "in_dim": embed.in_features, "hidden": embed.out_features, "layers": len(net.layers),
            "num_colors": net.num_colors, "chromatic_head": net.chi_head is not None,
            "features": {"random_features": random_features, "columns": ["log1p(degree)/log(2+N)", "q/num_colors"]
                         + [f"randn[{i}]" for i in range(random_features)]}}


def export_safetensors(net: ColoringGNN, random_features: int, job_dir: Path, extra: dict[str, Any] | None = None
                       ) -> Path:
    """Write ``job_dir/model`` with the network's current weights; its path."""
    config = {**gnn_config(net, random_features), **(extra or {})}
    return write_weights_folder(net, config, job_dir / MODEL_DIR)


def load_pretrained(path: str | Path, device: str | torch.device = "cpu") -> ColoringGNN:
    """The network of an exported folder, in eval mode (dropout off)."""
    from safetensors.torch import load_file

    folder = Path(path)
    config = read_weights_config(folder, FORMAT, VERSION, "colouring-network")
    net = ColoringGNN(int(config["in_dim"]), int(config["hidden"]), int(config["layers"]), int(config["num_colors"]),
                      0.0, bool(config["chromatic_head"]))
    net.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    return net.to(device).eval()
