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

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from gputrain.errors import GputrainError
from gputrain.train.gnn_coloring.model import ColoringGNN

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
    from safetensors.torch import save_file

    final, tmp = job_dir / MODEL_DIR, job_dir / f".{MODEL_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weights = {k: v.detach().to("cpu").contiguous().clone() for k, v in net.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps({**gnn_config(net, random_features), **(extra or {})}, indent=1) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def load_pretrained(path: str | Path, device: str | torch.device = "cpu") -> ColoringGNN:
    """The network of an exported folder, in eval mode (dropout off)."""
    from safetensors.torch import load_file

    folder = Path(path)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise GputrainError(f"{folder}: not a colouring-network export ({type(exc).__name__}: {exc})") from None
    if config.get("format") != FORMAT or config.get("version") != VERSION:
        raise GputrainError(f"{folder}/config.json: format {config.get('format')!r} version "
                            f"{config.get('version')!r}, expected {FORMAT!r} version {VERSION}")
    net = ColoringGNN(int(config["in_dim"]), int(config["hidden"]), int(config["layers"]), int(config["num_colors"]),
                      0.0, bool(config["chromatic_head"]))
    net.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    return net.to(device).eval()
