"""Mixed precision from the resolved plan: bf16 autocast, fp16 autocast + GradScaler, or fp32.

The planner writes the effective ``train.precision`` (never ``auto``) into the plan, so this module only
obeys it; the one override is the CPU, which always trains in fp32 (bf16 autocast on CPU is slow and its
numerics differ from the GPU runs it stands in for). A disabled GradScaler is handed out for bf16/fp32 so
training loops call ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()`` unconditionally.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class Precision:
    name: str  # effective: bf16 | fp16 | fp32
    device: torch.device
    scaler: torch.amp.GradScaler

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self.name]

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.name == "fp32":
            yield
            return
        with torch.autocast(device_type=self.device.type, dtype=self.dtype):
            yield


def make_precision(requested: str | None, device: torch.device) -> Precision:
    name = (requested or "fp32").lower()
    if name == "auto":
        name = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp16"
    if name not in _DTYPES:
        name = "fp32"
    if device.type != "cuda":
        name = "fp32"
    if device.type == "cuda":
        # TF32 for the fp32 parts (optimizer math, layers autocast keeps in fp32) on Ampere and newer.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    scaler = torch.amp.GradScaler(device.type, enabled=(name == "fp16"))
    return Precision(name=name, device=device, scaler=scaler)


def maybe_compile(model: torch.nn.Module, enabled: bool, device: torch.device) -> tuple[torch.nn.Module, str]:
    """torch.compile when asked and when the platform can (CUDA + triton); returns (model, note)."""
    if not enabled:
        return model, "compile off"
    if device.type != "cuda":
        return model, "compile skipped: CPU run"
    try:
        import triton  # noqa: F401
    except ImportError:
        return model, "compile skipped: triton not installed"
    return torch.compile(model), "compile on"  # type: ignore[return-value]
