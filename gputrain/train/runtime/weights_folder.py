"""One exported-weights folder: ``model.safetensors`` + ``config.json``, written whole or not at all.

The diffusion and GNN exports share this; each keeps its own config (what its loader needs) and its own
``format``/``version`` check, so a folder of one kind is refused by the other's loader in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from gputrain.errors import GputrainError


def write_weights_folder(module: nn.Module, config: dict[str, Any], final: Path) -> Path:
    """Write ``final`` through a temporary sibling renamed into place (a crash leaves the old one or none)."""
    from safetensors.torch import save_file

    tmp = final.parent / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # own contiguous CPU storage per tensor: safetensors refuses shared or strided tensors
    weights = {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def read_weights_config(folder: Path, fmt: str, version: int, what: str) -> dict[str, Any]:
    """``config.json`` of an export of kind ``fmt``/``version``; a one-line error naming ``what`` otherwise."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise GputrainError(f"{folder}: not a {what} export ({type(exc).__name__}: {exc})") from None
    if not isinstance(config, dict) or config.get("format") != fmt or config.get("version") != version:
        got = config if isinstance(config, dict) else {}
        raise GputrainError(f"{folder}/config.json: format {got.get('format')!r} version "
                            f"{got.get('version')!r}, expected {fmt!r} version {version}")
    return config
