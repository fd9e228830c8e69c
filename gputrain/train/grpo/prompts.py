"""Prompts as the policy was trained to see them, and the tokens that end its answers.

Why: an instruct or reasoning model (Qwen2.5-Instruct, R1-Distill) was tuned on its chat template; fed raw
``Problem: ...\\nSolution:`` text it answers off-distribution, and the reward then measures the mismatch.
``algorithm.prompt_format`` picks: ``chat`` wraps each task prompt as the user turn (after an optional
``algorithm.system_prompt``) with the tokenizer's template and the generation prompt; ``raw`` sends the
text as is; ``auto`` is ``chat`` when the tokenizer has a template. A chat-rendered prompt already holds
every special token the template wants, so it is tokenized without adding more (as TRL does).

Stopping: a chat model ends its turn with a token (``<|im_end|>``) that is often not the tokenizer's
``eos_token`` of the base vocabulary; the checkpoint's ``generation_config.eos_token_id`` lists them all.
:func:`stop_token_ids` is their union with the tokenizer's EOS; both rollout engines stop on any of them
and the completion mask ends at the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gputrain.errors import GputrainError


@dataclass(frozen=True)
class PromptFormat:
    """How task prompts become model input: ``chat`` (template, optional system turn) or ``raw``."""

    mode: str
    system: str | None = None

    @property
    def add_special_tokens(self) -> bool:
        """Raw text gets the tokenizer's usual specials (a BOS where it has one); a template already has them."""
        return self.mode == "raw"

    def render(self, tokenizer: Any, prompts: Sequence[str]) -> list[str]:
        if self.mode == "raw":
            return list(prompts)
        texts = []
        for prompt in prompts:
            messages = [{"role": "system", "content": self.system}] if self.system else []
            messages.append({"role": "user", "content": prompt})
            texts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        return texts


def resolve_prompt_format(requested: str, tokenizer: Any, system: str | None = None) -> PromptFormat:
    """``auto`` → chat when the tokenizer has a chat template, else raw; ``chat`` without one is an error."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if requested == "chat" and not has_template:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise GputrainError(
            f"algorithm.prompt_format=chat but the tokenizer of {name!r} has no chat template; "
            "set algorithm.prompt_format: raw"
        )
    if requested == "raw" or (requested == "auto" and not has_template):
        return PromptFormat("raw", None)
    return PromptFormat("chat", system)


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS first, then the generation config's EOS ids."""
    ids: list[int] = []
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    configured = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    candidates += list(configured) if isinstance(configured, (list, tuple)) else [configured]
    for value in candidates:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise GputrainError("the policy's tokenizer has no EOS token and its generation config lists none")
    return ids
