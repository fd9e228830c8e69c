"""Facts about one GPU type, as the catalog states them: what a plan was made for (snapshot in plan.json).

The catalog (``gputrain.hardware.catalog``) builds these from its data file; a plan keeps a copy, so a job
folder says which figures (memory, peak FLOP/s, price) its estimate used even after the catalog changes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GPUFacts(BaseModel):
    """One catalog entry: memory, precision support, dense peak rates, link, price, and its other names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="canonical catalog name, e.g. H100-80GB (cpu: no GPU)")
    description: str = ""
    memory_gib: float = Field(ge=0)
    bf16: bool
    fp8: bool
    tflops_bf16: float | None = Field(default=None, description="dense bf16 tensor TFLOP/s")
    tflops_fp16: float = Field(description="dense fp16 tensor TFLOP/s (cpu: the whole machine's rate)")
    bandwidth_gbs: float = Field(description="memory bandwidth, GB/s")
    interconnect: str = "none"
    interconnect_gbs: float = 0.0
    nvlink_domain: int = Field(default=0, ge=0, description="GPUs one NVLink fabric joins across nodes (GB200 NVL72: "
                               "72); 0: the GPUs of one node")
    aliases: tuple[str, ...] = ()
    nvidia_smi: tuple[str, ...] = ()
    gres: tuple[str, ...] = ()
    runpod_ids: tuple[str, ...] = ()
    price_usd_hour: float = Field(ge=0)
    price_source: str = ""

    @property
    def is_cpu(self) -> bool:
        return self.name == "cpu"

    def peak_tflops(self, precision: str) -> float:
        """Dense tensor TFLOP/s for the precision training will use (fp32 counts as the fp16 rate / 8)."""
        if precision == "bf16" and self.tflops_bf16:
            return self.tflops_bf16
        if precision == "fp32":
            return self.tflops_fp16 / 8 if not self.is_cpu else self.tflops_fp16
        return self.tflops_fp16
