"""Find out which GPUs a machine or a cluster has.

Local detection asks NVML first (no subprocess, exact names and memory), then ``nvidia-smi``; a machine with
neither simply has no GPUs. Cluster detection reads GRES from ``sinfo``; the parsing is a pure function so
it is tested against recorded output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from gputrain.contract.hardware import GPUFacts
from gputrain.errors import ClusterError
from gputrain.hardware.catalog import from_gres, from_nvidia_smi


@dataclass(frozen=True)
class DetectedGPU:
    index: int
    name: str
    memory_mib: int
    source: str

    def catalog_type(self) -> GPUFacts:
        return from_nvidia_smi(self.name)


def detect_local() -> list[DetectedGPU]:
    gpus = _detect_nvml()
    if gpus is None:
        gpus = _detect_nvidia_smi()
    return gpus or []


def _detect_nvml() -> list[DetectedGPU] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no driver here
        return None
    try:
        found: list[DetectedGPU] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            found.append(DetectedGPU(i, name, int(memory), "nvml"))
        return found
    except pynvml.NVMLError:
        return None  # a driver that half-answers: let nvidia-smi try
    finally:
        pynvml.nvmlShutdown()


def _detect_nvidia_smi() -> list[DetectedGPU] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi_csv(out)


def parse_nvidia_smi_csv(text: str) -> list[DetectedGPU]:
    found = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            memory = int(float(parts[2])) if re.match(r"^\d+(\.\d+)?$", parts[2]) else 0
            found.append(DetectedGPU(int(parts[0]), parts[1], memory, "nvidia-smi"))
    return found


@dataclass(frozen=True)
class ClusterGres:
    partition: str
    node: str
    gres_name: str
    gres_type: str | None
    count: int

    def candidates(self) -> list[GPUFacts]:
        return from_gres(self.gres_type) if self.gres_type else []


_GRES_RE = re.compile(r"(?P<name>[a-zA-Z_]+)(?::(?P<type>[A-Za-z0-9_.-]+))?:(?P<count>\d+)")


def parse_sinfo_gres(text: str) -> list[ClusterGres]:
    """Parse ``sinfo -h -N -o '%P|%N|%G'`` lines: ``gpu:volta:2(S:0-1)``, ``gpu:4``, ``(null)``."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        partition, node, gres = (p.strip() for p in parts)
        for item in re.split(r",(?![^(]*\))", gres):
            item = re.sub(r"\(.*?\)", "", item).strip()
            match = _GRES_RE.fullmatch(item)
            if match and match["name"] == "gpu":
                rows.append(ClusterGres(partition.rstrip("*"), node, "gpu", match["type"], int(match["count"])))
    return rows


def detect_cluster() -> list[ClusterGres]:
    exe = shutil.which("sinfo")
    if exe is None:
        raise ClusterError("sinfo is not on PATH: run this on a Slurm login node (or load the slurm module)")
    try:
        proc = subprocess.run([exe, "-h", "-N", "-o", "%P|%N|%G"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"sinfo failed: {exc}") from None
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise ClusterError(f"sinfo failed: {first} (is slurmctld reachable?)")
    return parse_sinfo_gres(proc.stdout)
