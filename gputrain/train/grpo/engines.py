"""The rollout-engine protocol: what the GRPO loop needs from HF ``generate`` and from colocated vLLM.

Why a protocol: the loop should not branch on the engine. Both engines take the same prompt strings and
:class:`Sampling`, return the same :class:`~gputrain.train.grpo.rollout.Rollout`, and are told when the
policy's weights changed (:meth:`RolloutEngine.weights_changed`); :meth:`RolloutEngine.prepare` then does
whatever must happen before the next rollout (vLLM: push the weights, which every rank joins under FSDP2;
HF: nothing, it samples from the live policy) and returns the seconds it took.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from gputrain.train.grpo.rollout import Rollout, generate


@dataclass(frozen=True)
class Sampling:
    """The recipe's sampling parameters for one rollout, and how prompts are tokenized and stopped."""

    max_prompt_length: int
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    top_k: int | None = None
    eos_ids: list[int] = field(default_factory=list)
    add_special_tokens: bool = True

    def keywords(self) -> dict[str, Any]:
        return {
            "max_prompt_length": self.max_prompt_length,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "eos_ids": self.eos_ids or None,
            "add_special_tokens": self.add_special_tokens,
        }


class RolloutEngine(Protocol):
    name: str

    def prepare(self, model: torch.nn.Module) -> float:
        """Make the next rollout sample from ``model``'s current weights; seconds spent (every rank calls it)."""
        ...

    def weights_changed(self) -> None:
        """The optimizer changed the policy since the last :meth:`prepare`."""
        ...

    def generate(self, prompts: list[str], sampling: Sampling) -> Rollout:
        """One completion per prompt string (prompts already repeated G times)."""
        ...


class HFEngine:
    """HF ``generate`` on the training model itself (under FSDP2 a collective: every rank calls it)."""

    name = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, device: torch.device, autocast: Any) -> None:
        self.model, self.tokenizer, self.device, self.autocast = model, tokenizer, device, autocast

    def prepare(self, model: torch.nn.Module) -> float:
        return 0.0

    def weights_changed(self) -> None:
        return None

    def generate(self, prompts: list[str], sampling: Sampling) -> Rollout:
        autocast = self.autocast() if callable(self.autocast) else contextlib.nullcontext()
        return generate(self.model, self.tokenizer, prompts, device=self.device, autocast=autocast,
                        **sampling.keywords())


class VLLMRolloutEngine:
    """Colocated vLLM (``vllm_engine.VLLMEngine``): weights pushed once after start/resume and after each step's
    updates, before the next rollout (no rollout happens between the updates of one step)."""

    name = "vllm"

    def __init__(self, engine: Any, tokenizer: Any, device: torch.device) -> None:
        self.engine, self.tokenizer, self.device = engine, tokenizer, device
        self.stale = True  # vLLM holds the start-up weights until the first sync (after a resume too)

    def prepare(self, model: torch.nn.Module) -> float:
        if not self.stale:
            return 0.0
        import time

        t0 = time.perf_counter()
        self.engine.sync_weights(model)
        self.stale = False
        return time.perf_counter() - t0

    def weights_changed(self) -> None:
        self.stale = True

    def generate(self, prompts: list[str], sampling: Sampling) -> Rollout:
        rollout: Rollout = self.engine.generate(self.tokenizer, prompts, device=self.device, **sampling.keywords())
        return rollout
