"""HF generate's static KV cache for GRPO rollouts (#27, ``algorithm.generate_cache``).

The static path changes shapes, never samples: prompts are left-padded to ``max_prompt_length`` (the one shape
the compiled decode step is built for), masked, and trimmed back, so on the CPU in fp32 -- where transformers
runs the static cache eagerly, the caches being numerically equal -- it gives the dynamic cache's tokens,
greedy and sampled from the same seed. A static cache that fails falls back to the dynamic one, same tokens,
one line. The decision (``contract.kernels.resolve_generate_cache``) is the one the planner prices.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gputrain.contract.kernels import DeviceFacts, resolve_generate_cache
from gputrain.recipe.schema import ModelSpec
from gputrain.train.grpo.engines import HFEngine, Sampling
from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer
from gputrain.train.grpo.rollout import Rollout, generate

CPU = torch.device("cpu")
CORPUS = ["Question: What is 2 + 3?\nAnswer (end with #### and the number): 2 + 3 = 5\n#### 5"] * 8
PROMPTS = ["Question: What is 2 + 3?", "What", "Answer (end with", "2 + 3 = 5\n#### 5 Question"]
BUCKET, NEW = 24, 12


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    tok = train_tiny_tokenizer(CORPUS, vocab_size=60)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=2), tok, seed=5)
    return model, tok


def _roll(model: Any, tok: Any, cache: str, temperature: float) -> Rollout:
    torch.manual_seed(0)
    return generate(model, tok, PROMPTS, max_prompt_length=BUCKET, max_new_tokens=NEW, temperature=temperature,
                    device=CPU, cache=cache)


def _same(a: Rollout, b: Rollout) -> None:
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "truncated"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.texts == b.texts


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_the_static_cache_gives_the_dynamic_caches_rollout(tiny: tuple[Any, Any], temperature: float) -> None:
    model, tok = tiny
    dynamic, static = _roll(model, tok, "dynamic", temperature), _roll(model, tok, "static", temperature)
    _same(dynamic, static)
    # the static cache was built at the bucket's fixed shape (what keeps the compiled decode from recompiling)
    assert model._previous_max_cache_length == BUCKET + NEW - 1  # generate sizes it max_length - 1
    # and the prompts were trimmed back to the longest one, as the dynamic path pads them
    assert static.prompt_ids.size(1) < BUCKET and bool(static.prompt_mask[:, 0].any())
    if temperature > 0:  # sampling really drew: the same seed, not a degenerate distribution, made them equal
        assert len(set(static.completion_ids.flatten().tolist())) > 4


def test_a_failing_static_cache_falls_back_to_the_dynamic_one_with_one_line(
        tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers.generation.utils import GenerationMixin

    model, tok = tiny

    def broken(*args: Any, **kwargs: Any) -> Any:  # what a failing compile or cache build looks like from here
        raise RuntimeError("inductor: backend compiler failed")

    sampling = Sampling(BUCKET, NEW, 1.0)
    torch.manual_seed(0)
    expected = HFEngine(model, tok, CPU, None, "dynamic").generate(PROMPTS, sampling)
    monkeypatch.setattr(GenerationMixin, "_prepare_static_cache", broken)
    engine = HFEngine(model, tok, CPU, None, "static")
    torch.manual_seed(0)
    got = engine.generate(PROMPTS, sampling)
    _same(expected, got)  # the retry starts from the random state the failed call started from
    assert engine.cache == "dynamic" and engine.fallback == "RuntimeError: inductor: backend compiler failed"
    engine.generate(PROMPTS, sampling)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "static KV cache failed" in ln]
    assert len(lines) == 1


CUDA = DeviceFacts(device="cuda", name="H200", capability=(9, 0), bf16=True)


@pytest.mark.parametrize(("requested", "facts", "sharded", "expected"), [
    ("auto", CUDA, False, "static"),
    ("auto", DeviceFacts(device="cpu"), False, "dynamic"),
    ("auto", CUDA.model_copy(update={"has_triton": False}), False, "dynamic"),
    ("auto", CUDA, True, "dynamic"),
    ("dynamic", CUDA, False, "dynamic"),
    ("static", DeviceFacts(device="cpu"), False, "static"),
])
def test_the_generate_cache_decision(requested: Any, facts: DeviceFacts, sharded: bool, expected: str) -> None:
    cache, why = resolve_generate_cache(requested, facts, sharded=sharded)
    assert cache == expected and why.startswith(expected)


@pytest.mark.slow  # dynamo traces the decode step: ~5-10 s on the shared 2-core machine
def test_the_decode_step_compiles_once_across_steps(tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Four rollouts of prompts whose longest differ, with optimizer updates between (a GRPO run's steps): the
    bucket keeps every decode-step input one shape, so dynamo compiles one frame and never recompiles.

    transformers compiles the decode step on GPUs only (``_valid_auto_compile_criteria``) and through
    ``torch.compile(self.__call__)``, which torch 2.13 does not trace (no frame); here ``forward`` is compiled with
    a counting backend in its place, at the call site transformers uses (``get_compiled_call``)."""
    import copy

    from torch._dynamo.testing import CompileCounter

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    model.__dict__.pop("_previous_max_cache_length", None)  # transformers' running maximum of the cache length
    counter = CompileCounter()
    compiled = torch.compile(model.forward, backend=counter)
    monkeypatch.setattr(model, "_valid_auto_compile_criteria", lambda *a: True)
    monkeypatch.setattr(model, "get_compiled_call", lambda config: compiled)
    other = ["What is", "2 + 3 = 5", "Question: What", "#### 5"]
    widths = set()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for prompts in (other, PROMPTS, other, PROMPTS):  # shorter first: without the bucket, the cache would grow
        roll = generate(model, tok, prompts, max_prompt_length=BUCKET, max_new_tokens=6, temperature=1.0,
                        device=CPU, cache="static")
        widths.add(roll.prompt_ids.size(1))
        model.train()
        model(input_ids=roll.input_ids).logits.float().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    assert len(widths) == 2  # the batches' longest prompts differ: without the bucket, the cache would too
    assert counter.frame_count == 1
