"""Which hub repositories a plan loads: :mod:`gputrain.contract.needs` (the renderer reads it too)."""

from gputrain.contract.needs import (
    BUILTIN_MODELS,
    BUILTIN_SOURCES,
    DIFFUSION_TOKENIZER,
    HUB_CONFIGS,
    hub_items,
    node_packages,
)

__all__ = ["BUILTIN_MODELS", "BUILTIN_SOURCES", "DIFFUSION_TOKENIZER", "HUB_CONFIGS", "hub_items", "node_packages"]
