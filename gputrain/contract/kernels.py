"""The one decision of how a training runs on a device: attention kernel, ``torch.compile``, precision.

Both sides call :func:`resolve`: the planner with the catalog's facts about the GPU it plans for (so the plan
predicts the path that will run and records it with the reason), the trainer with the facts it detects on its
node (``gputrain.train.runtime.kernels``), so a node that lacks something the plan assumed (a torch build
without FlexAttention, an older GPU) falls back, and says so in the job summary. Pure: facts in, choice out.

The support matrix (tests/unit/test_kernel_resolver.py holds it):

* Block-diffusion masks (``mask="block"``): ``auto`` → FlexAttention with a block mask, compiled, where the device
  is CUDA with compute capability ≥ 8.0 (Ampere and later; the V100's and T4's shared memory and missing bf16
  rule its Triton kernels out), torch ≥ 2.5 (FlexAttention's ``BlockMask`` API) and Triton is installed;
  SDPA with a dense boolean mask otherwise (CPU, V100, T4, builds without flex or Triton). flash-attn cannot
  express the block mask, so it is never picked for it.
* Causal language models (``mask="causal"``): ``auto`` → flash-attn where installed on an Ampere-or-later GPU,
  else SDPA; compile ``auto`` stays off (HF models recompile per generated length).
* ``compile: auto`` follows the attention choice (flex needs compiling: eager flex materialises the scores);
  ``compile: true`` is honoured only on CUDA with Triton. Precision ``auto`` → bf16 where the GPU has it,
  else fp16; CPU runs fp32.

A fact the planner does not know (``None``: the node's torch build, Triton, flash-attn) is assumed present;
the node decides for real.
"""

from __future__ import annotations

from typing import Literal, cast

from pydantic import BaseModel, ConfigDict

MaskKind = Literal["block", "causal"]
AttentionKernel = Literal["sdpa", "flash", "flex", "eager"]
#: FlexAttention's BlockMask API is public from this torch release on
FLEX_MIN_TORCH = (2, 5)
#: compute capability FlexAttention's (and flash-attn 2's) kernels need
MIN_CAPABILITY = (8, 0)


class DeviceFacts(BaseModel):
    """What the resolver needs to know about a device; ``None`` = not known here (assumed available)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: Literal["cuda", "cpu"]
    name: str = ""
    capability: tuple[int, int] | None = None
    bf16: bool = False
    torch_version: str | None = None
    has_flex: bool | None = None
    has_triton: bool | None = None
    has_flash_attn: bool | None = None
    source: Literal["catalog", "detected"] = "catalog"


class KernelRequest(BaseModel):
    """What the recipe asked for (``train.attention``, ``train.compile``, ``train.precision``) and the mask kind."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attention: Literal["auto", "sdpa", "flash", "flex", "eager"] = "auto"
    compile: bool | Literal["auto"] = "auto"
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    mask: MaskKind = "causal"


class KernelChoice(BaseModel):
    """The path that runs, with one line saying why (shown in the plan and in the job summary)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attention: AttentionKernel
    compile: bool
    precision: Literal["bf16", "fp16", "fp32"]
    reason: str
    decided_on: Literal["catalog", "detected"] = "catalog"

    def label(self) -> str:
        return f"{self.attention}{' + compile' if self.compile else ' (eager)'}, {self.precision}"


class KernelError(ValueError):
    """A request the device cannot honour at all (bf16 on a GPU without it)."""


def _version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _ampere(facts: DeviceFacts) -> bool:
    if facts.capability is not None:
        return facts.capability >= MIN_CAPABILITY
    return facts.bf16  # the catalog marks Ampere-and-later parts by bf16 support


def flex_blocker(facts: DeviceFacts) -> str | None:
    """Why FlexAttention cannot run here, or None."""
    if facts.device != "cuda":
        return "no CUDA device"
    if not _ampere(facts):
        cap = f" (sm {facts.capability[0]}.{facts.capability[1]})" if facts.capability else ""
        return f"{facts.name or 'this GPU'}{cap} predates Ampere"
    version = _version(facts.torch_version)
    if version is not None and version < FLEX_MIN_TORCH:
        return f"torch {facts.torch_version} predates FlexAttention's block masks (2.5)"
    if facts.has_flex is False:
        return "this torch build has no FlexAttention"
    if facts.has_triton is False:
        return "Triton is not installed"
    return None


def _precision(req: KernelRequest, facts: DeviceFacts) -> tuple[Literal["bf16", "fp16", "fp32"], str]:
    if facts.device == "cpu":
        return "fp32", "CPU: fp32"
    if req.precision == "auto":
        return ("bf16", "bf16 supported") if facts.bf16 else ("fp16", "no bf16 on this GPU: fp16 with loss scaling")
    if req.precision == "bf16" and not facts.bf16:
        raise KernelError(f"train.precision=bf16 but {facts.name or 'this GPU'} has no bf16: use fp16 or auto")
    return req.precision, "as asked"


def resolve(req: KernelRequest, facts: DeviceFacts) -> KernelChoice:
    """Attention kernel, compile and precision for ``req`` on a device with ``facts`` (see the module doc)."""
    precision, why_precision = _precision(req, facts)
    notes: list[str] = []
    attention: AttentionKernel
    blocker = flex_blocker(facts)
    if req.mask == "block":
        if req.attention in ("auto", "flex"):
            attention = "flex" if blocker is None else "sdpa"
            notes.append("flex with the block mask" if blocker is None else f"sdpa: {blocker}")
        elif req.attention == "flash":
            attention = "flex" if blocker is None else "sdpa"
            notes.append(f"flash-attn cannot express the block mask: {attention}")
        else:
            attention = cast(AttentionKernel, req.attention)
            notes.append(f"{attention} as asked")
    else:
        flash_blocker = "no CUDA device" if facts.device != "cuda" else \
            None if _ampere(facts) else f"{facts.name or 'this GPU'} predates Ampere"
        flash_ok = flash_blocker is None and facts.has_flash_attn is not False
        if req.attention in ("auto", "flash"):
            attention = "flash" if flash_ok else "sdpa"
            if attention == "flash":
                notes.append("flash-attn" + (" (assumed installed on the node)" if facts.has_flash_attn is None
                                             else " installed"))
            else:
                notes.append("sdpa: " + (flash_blocker or "flash-attn is not installed"))
        elif req.attention == "flex" and blocker is not None:
            attention = "sdpa"
            notes.append(f"sdpa: {blocker}")
        else:
            attention = cast(AttentionKernel, req.attention)
            notes.append(f"{attention} as asked")
    compile_ok = facts.device == "cuda" and facts.has_triton is not False
    if req.compile == "auto":
        compiled = attention == "flex" and compile_ok
        notes.append("compiled" if compiled else "eager")
    elif req.compile and not compile_ok:
        compiled = False
        notes.append("compile skipped: " + ("no CUDA device" if facts.device != "cuda" else "Triton not installed"))
    else:
        compiled = bool(req.compile)
        notes.append("compiled (asked)" if compiled else "eager (asked)")
    notes.append(why_precision)
    return KernelChoice(attention=attention, compile=compiled, precision=precision, reason="; ".join(notes),
                        decided_on=facts.source)


GenerateCache = Literal["dynamic", "static"]


def resolve_generate_cache(requested: Literal["auto", "dynamic", "static"], facts: DeviceFacts, *,
                           sharded: bool = False) -> tuple[GenerateCache, str]:
    """HF ``generate``'s KV cache for the rollouts (``algorithm.generate_cache``) and one line saying why.

    The static cache is what lets transformers compile the decode step (``GenerationMixin.
    _valid_auto_compile_criteria``: a compileable cache on a CUDA device; ``CompileConfig``'s default mode
    ``reduce-overhead`` replays it as a CUDA graph), which removes the eager per-operator launches that bound a
    small model's decode. ``auto`` takes it where that compile runs: a CUDA device with Triton, the policy not
    sharded (FSDP2 runs its hooks and regathers every step around the decode, nothing a replayed graph holds).
    Elsewhere the static cache would run eager and buy nothing, so ``auto`` keeps the dynamic one; ``static``
    asked is honoured everywhere (on the CPU it runs eager: the tests compare it with the dynamic cache).
    """
    if requested == "dynamic":
        return "dynamic", "dynamic KV cache (asked)"
    if requested == "static":
        compiled = facts.device == "cuda" and facts.has_triton is not False
        return "static", "static KV cache (asked)" + ("; decode step compiled" if compiled else "; eager")
    if facts.device != "cuda":
        return "dynamic", "dynamic KV cache (auto: no CUDA device, transformers compiles the decode step on GPUs)"
    if facts.has_triton is False:
        return "dynamic", "dynamic KV cache (auto: Triton is not installed, the decode step cannot compile)"
    if sharded:
        return "dynamic", "dynamic KV cache (auto: FSDP-sharded policy, its hooks run around every decode step)"
    return "static", "static KV cache + compiled decode step (auto: CUDA with Triton)"
