"""Typed access to the GPU catalog (``gputrain/data/catalog.yaml``).

Names are resolved strictly: a canonical name, an alias, an ``nvidia-smi`` name or a Slurm GRES type maps
to exactly one entry, or the caller gets a :class:`HardwareError` that lists the known names. Planning for
the wrong GPU silently would be worse than stopping.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from gputrain.contract.hardware import GPUFacts
from gputrain.errors import HardwareError, unknown_name
from gputrain.resources import data_dir


def _entry(name: str, raw: dict[str, Any]) -> GPUFacts:
    link = raw.get("interconnect") or {}
    return GPUFacts(
        name=name,
        description=str(raw.get("description", "")),
        memory_gib=float(raw["memory_gib"]),
        bf16=bool(raw["bf16"]),
        fp8=bool(raw["fp8"]),
        tflops_bf16=None if raw.get("tflops_bf16") is None else float(raw["tflops_bf16"]),
        tflops_fp16=float(raw["tflops_fp16"]),
        bandwidth_gbs=float(raw["bandwidth_gbs"]),
        interconnect=str(link.get("kind", "none")),
        interconnect_gbs=float(link.get("gbs", 0)),
        nvlink_domain=int(link.get("domain", 0)),
        aliases=tuple(str(a) for a in raw.get("aliases", [])),
        nvidia_smi=tuple(str(a) for a in raw.get("nvidia_smi", [])),
        gres=tuple(str(a) for a in raw.get("gres", [])),
        runpod_ids=tuple(str(a) for a in raw.get("runpod_ids", [])),
        price_usd_hour=float(raw["price_usd_hour"]),
        price_source=str(raw.get("price_source", "")),
    )


@functools.cache
def catalog() -> dict[str, GPUFacts]:
    path = data_dir() / "catalog.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    return {name: _entry(name, entry) for name, entry in raw.items()}


def known_names() -> list[str]:
    return list(catalog())


def _norm(text: str) -> str:
    return text.strip().lower().replace("_", "-").replace(" ", "-")


def get_gpu(name: str) -> GPUFacts:
    """Resolve a name a person typed (canonical or alias, any case)."""
    wanted = _norm(name)
    for gpu in catalog().values():
        if wanted == _norm(gpu.name) or wanted in (_norm(a) for a in gpu.aliases):
            return gpu
    spellings = {a: gpu.name for gpu in catalog().values() for a in gpu.aliases}
    raise HardwareError(unknown_name("GPU type", name, known_names(), spellings=spellings))


def from_nvidia_smi(name: str) -> GPUFacts:
    """Map an ``nvidia-smi``/NVML device name to its catalog entry."""
    wanted = name.upper()
    best: tuple[int, GPUFacts] | None = None
    for gpu in catalog().values():
        for pattern in gpu.nvidia_smi:
            if pattern.upper() in wanted and (best is None or len(pattern) > best[0]):
                best = (len(pattern), gpu)
    if best is None:
        raise HardwareError(f"GPU {name!r} is not in the catalog; known: {', '.join(known_names())}")
    return best[1]


def from_gres(gres_type: str) -> list[GPUFacts]:
    """All catalog entries a Slurm GRES type may denote (``volta`` → both V100 sizes)."""
    wanted = gres_type.lower()
    return [gpu for gpu in catalog().values() if wanted in (g.lower() for g in gpu.gres)]


def from_runpod_id(gpu_type_id: str) -> GPUFacts:
    for gpu in catalog().values():
        if gpu_type_id in gpu.runpod_ids:
            return gpu
    raise HardwareError(f"RunPod GPU {gpu_type_id!r} is not in the catalog")
