"""ONNX export of the colouring network with dynamic node and edge counts, checked with onnxruntime.

Uses the dynamo exporter (``dynamo=True``): the legacy one writes ``index_add_`` as a scatter without
reduction, so duplicate destinations overwrite each other and the model is silently wrong (NOTES.md). The
check runs a graph of a size the export never saw and compares the logits with torch's.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import torch

from gputrain.errors import GputrainError


def export_onnx(model: torch.nn.Module, example_x: torch.Tensor, example_ei: torch.Tensor, path: Path) -> None:
    model = copy.deepcopy(model).cpu().float().eval()
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


def check_onnx(model: torch.nn.Module, path: Path, x: torch.Tensor, edge_index: torch.Tensor) -> float:
    """Max |torch - onnxruntime| on one graph (CPU, fp32)."""
    import onnxruntime as ort

    model = copy.deepcopy(model).cpu().float().eval()
    with torch.no_grad():
        expected = model(x.cpu(), edge_index.cpu()).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {"x": x.cpu().numpy(), "edge_index": edge_index.cpu().numpy()})
    return float(np.max(np.abs(np.asarray(got) - expected))) if expected.size else 0.0
