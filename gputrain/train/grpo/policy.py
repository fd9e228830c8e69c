"""The policy and its tokenizer: a Hugging Face checkpoint, or a tiny Qwen2 built from a config.

The tiny model (``model.name: tiny-qwen2``) needs no download: its tokenizer is a byte-level BPE trained
on the task's own text with ``tokenizers`` and wrapped in ``PreTrainedTokenizerFast``, and its weights are
a random init of ``Qwen2Config`` sized by the recipe's ``model`` section. CPU profiles and tests use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from gputrain.recipe.schema import ModelSpec

TINY_NAMES = ("tiny-qwen2", "tiny")
#: The tiny architecture's shape where the recipe's ``model:`` leaves a dimension unset.
TINY_SHAPE = {"hidden_size": 64, "num_heads": 4, "num_layers": 2, "seq_len": 512, "vocab_size": 512}
PAD, EOS = "<|pad|>", "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
#: A small ChatML template (the layout Qwen's chat models use), so the tiny model runs the chat path too.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}" + IM_START + "{{ m['role'] }}\n{{ m['content'] }}" + IM_END + "\n{% endfor %}"
    "{% if add_generation_prompt %}" + IM_START + "assistant\n{% endif %}"
)


def is_tiny(name: str) -> bool:
    return name.lower() in TINY_NAMES


def policy_tokenizer(model_spec: ModelSpec, corpus: Iterable[str], *, revision: str | None = None,
                     chat: bool = True) -> Any:
    """The tokenizer of the policy ``model_spec`` names: trained on ``corpus`` for the tiny model, else the
    checkpoint's own (at ``revision``: the commit ``gputrain prepare`` pinned in the plan, if any).

    ``chat=False`` (``algorithm.prompt_format: raw``): the tiny tokenizer gets no chat template, so a policy
    trained on raw prompts is not presented (nor exported) as a chat model (issue 29)."""
    if is_tiny(model_spec.name):
        tok = train_tiny_tokenizer(corpus, vocab_size=model_spec.vocab_size or TINY_SHAPE["vocab_size"])
        if not chat:
            tok.chat_template = None
        return tok
    return load_tokenizer(model_spec.name, revision=revision)


def train_tiny_tokenizer(corpus: Iterable[str], vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer fitted to ``corpus``; left padding, as generation wants.

    Only bytes seen in ``corpus`` enter the vocabulary (no 256-byte base alphabet): a tiny random policy
    then samples among the task's own characters, which is what lets it stumble on right answers. It has a
    ChatML chat template (:data:`TINY_CHAT_TEMPLATE`; the role names join the corpus) and, like Qwen's chat
    tokenizers, ``<|im_end|>`` ends a turn while ``<|endoftext|>`` stays the EOS token: the model's
    generation config lists both (:func:`build_model`).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS, IM_START, IM_END],
        show_progress=False,
    )
    tok.train_from_iterator([*corpus, "system\nuser\nassistant\n"], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, additional_special_tokens=[IM_START, IM_END]
    )
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def load_tokenizer(name: str, *, revision: str | None = None) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name, revision=revision)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def build_model(model_spec: ModelSpec, tokenizer: Any, *, attention: str = "sdpa", seed: int = 0,
                revision: str | None = None) -> Any:
    """The causal LM in float32 (autocast supplies bf16/fp16 compute; the optimizer keeps fp32 weights).

    ``attention`` is the plan's effective value (sdpa/flash/eager/flex); ``flash`` maps to
    ``flash_attention_2``.
    """
    from transformers import AutoModelForCausalLM, Qwen2Config

    impl = {"flash": "flash_attention_2", "flex": "flex_attention"}.get(attention, attention)
    if impl == "auto":
        impl = "sdpa"
    name = model_spec.name
    if is_tiny(name):
        hidden = model_spec.hidden_size or TINY_SHAPE["hidden_size"]
        heads = model_spec.num_heads or TINY_SHAPE["num_heads"]
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=hidden * 3,
            num_hidden_layers=model_spec.num_layers or TINY_SHAPE["num_layers"],
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=model_spec.seq_len or TINY_SHAPE["seq_len"],
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.eos_token_id,
        )
        config._attn_implementation = impl
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    else:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32, attn_implementation=impl,
                                                     revision=revision)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if is_tiny(name):  # a checkpoint keeps its own list (e.g. Qwen2.5-Instruct: <|im_end|>, <|endoftext|>)
        ends = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.eos_token_id]
        model.generation_config.eos_token_id = [int(i) for i in ends if i is not None]
    elif model.generation_config.eos_token_id is None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute activations in backward; non-reentrant so it composes with DDP and FSDP2."""
    # transformers 5 renamed the switch (the old name warns); 4.x only has the old one.
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False
