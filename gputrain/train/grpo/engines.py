"""The rollout-engine protocol: what the GRPO loop needs from HF ``generate`` and from colocated vLLM.

Why a protocol: the loop should not branch on the engine. Both engines take the same prompt strings and
:class:`Sampling`, return the same :class:`~gputrain.train.grpo.rollout.Rollout`, and are told when the
policy's weights changed (:meth:`RolloutEngine.weights_changed`); :meth:`RolloutEngine.prepare` then does
whatever must happen before the next rollout (vLLM: push the weights, which every rank joins under FSDP2;
HF: nothing, it samples from the live policy) and returns the seconds it took.
"""

from __future__ import annotations

import contextlib
import sys
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
    """HF ``generate`` on the training model itself (under FSDP2 a collective: every rank calls it).

    ``cache`` is the KV cache ``contract.kernels.resolve_generate_cache`` chose. A static-cache call that
    raises (the decode step's compile, a transformers that cannot build the cache for this model) is retried
    once with the dynamic cache from the same random state, which then stays for the run: one line on stderr
    and :attr:`fallback` (``result.json``'s ``generate_cache_fallback``) say why; the run never dies of it.
    """

    name = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, device: torch.device, autocast: Any,
                 cache: str = "dynamic") -> None:
        self.model, self.tokenizer, self.device, self.autocast = model, tokenizer, device, autocast
        self.cache = cache
        self.fallback: str | None = None

    def prepare(self, model: torch.nn.Module) -> float:
        return 0.0

    def weights_changed(self) -> None:
        return None

    def _call(self, prompts: list[str], sampling: Sampling) -> Rollout:
        autocast = self.autocast() if callable(self.autocast) else contextlib.nullcontext()
        return generate(self.model, self.tokenizer, prompts, device=self.device, autocast=autocast,
                        cache=self.cache, **sampling.keywords())

    def generate(self, prompts: list[str], sampling: Sampling) -> Rollout:
        if self.cache != "static":
            return self._call(prompts, sampling)
        cuda = self.device.type == "cuda"
        rng = torch.get_rng_state(), (torch.cuda.get_rng_state(self.device) if cuda else None)
        try:
            return self._call(prompts, sampling)
        except Exception as exc:  # any failure of the static path: the dynamic one still works
            self.fallback = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:240]
            print(f"[grpo] warning: the static KV cache failed ({self.fallback}); rollouts fall back to the "
                  "dynamic cache for the rest of the run", file=sys.stderr, flush=True)
            self.cache = "dynamic"
            torch.set_rng_state(rng[0])
            if rng[1] is not None:
                torch.cuda.set_rng_state(rng[1], self.device)
            return self._call(prompts, sampling)


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
