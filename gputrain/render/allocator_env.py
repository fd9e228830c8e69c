"""The environment every GPU job starts with before the recipe's own ``env``: the CUDA allocator's settings.

``expandable_segments:True`` lets the caching allocator grow one mapped segment instead of reserving a new
block for each new tensor size; the diffusion loss's step-to-step varying ``rows × V`` tensors reserved
74 GiB for 37 GiB allocated on an H100 without it (benchmarks/RESULTS.md, 2026-11-26). torchtitan's
``run_train.sh`` launches every training with it (``PYTORCH_ALLOC_CONF="expandable_segments:True"``); we set
the older name, ``PYTORCH_CUDA_ALLOC_CONF``, which every torch release reads (the newer name only from 2.9).
A recipe's ``env`` that sets it wins; CPU plans get nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

GPU_ALLOCATOR_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
#: either name in the recipe's ``env`` replaces the default (torch ≥ 2.9 prefers the newer one)
ALLOCATOR_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def launch_env(plan: JobPlan) -> dict[str, str]:
    """The ``export``\\ s of a launcher: the GPU allocator defaults, then the recipe's ``env``."""
    own = dict(plan.recipe.env)
    if plan.gpu.is_cpu or any(name in own for name in ALLOCATOR_NAMES):
        return own
    return dict(GPU_ALLOCATOR_ENV) | own
