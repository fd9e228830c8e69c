"""Prompts as the model expects them, every EOS id, and sampling that only the recipe controls (issue 16 #2).

The tiny CPU policy has a ChatML template, so the chat path is the one tested; a checkpoint's generation
config (``repetition_penalty``, ``no_repeat_ngram_size``) must not leak into HF ``generate``.
"""

from __future__ import annotations

import pytest
import torch

from gputrain.errors import GputrainError
from gputrain.recipe.schema import ModelSpec
from gputrain.train.grpo.policy import IM_END, build_model, train_tiny_tokenizer
from gputrain.train.grpo.prompts import resolve_prompt_format, stop_token_ids
from gputrain.train.grpo.rollout import completion_masks, generate, rollout_from_token_ids

CPU = torch.device("cpu")
CORPUS = ["Question: What is 2 + 3?\nAnswer (end with #### and the number): 2 + 3 = 5\n#### 5"] * 8


def _tiny(seed: int = 3) -> tuple:
    tok = train_tiny_tokenizer(CORPUS, vocab_size=60)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=1, num_heads=2), tok, seed=seed)
    return model, tok


def test_tiny_tokenizer_has_a_chat_template_and_auto_picks_it() -> None:
    _, tok = _tiny()
    fmt = resolve_prompt_format("auto", tok, system="Answer with the number")
    assert fmt.mode == "chat" and not fmt.add_special_tokens
    text = fmt.render(tok, ["What is 2 + 3?"])[0]
    assert text == ("<|im_start|>system\nAnswer with the number<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text  # round trip, roles in vocabulary
    assert resolve_prompt_format("raw", tok).render(tok, ["x"]) == ["x"]


def test_chat_without_a_template_is_a_clear_error_and_auto_falls_back_to_raw() -> None:
    _, tok = _tiny()
    tok.chat_template = None
    assert resolve_prompt_format("auto", tok).mode == "raw"
    with pytest.raises(GputrainError, match="no chat template"):
        resolve_prompt_format("chat", tok)


def test_every_eos_id_of_the_generation_config_stops() -> None:
    model, tok = _tiny()
    im_end = tok.convert_tokens_to_ids(IM_END)
    stops = stop_token_ids(tok, model.generation_config)
    assert stops == [tok.eos_token_id, im_end]
    ids = torch.tensor([[7, im_end, 8, 9], [7, 8, tok.eos_token_id, 9], [7, 8, 9, 10]])
    mask, truncated = completion_masks(ids, stops)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, True]
    roll = rollout_from_token_ids([[3]], [[5, im_end, 6]], eos_ids=stops, pad_id=tok.pad_token_id,
                                  decode=lambda t: tok.batch_decode(t, skip_special_tokens=True))
    assert roll.completion_mask.tolist() == [[1, 1, 0]] and not bool(roll.truncated[0])


def _greedy_by_hand(model: torch.nn.Module, ids: torch.Tensor, steps: int, stops: list[int]) -> list[int]:
    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            token = int(model(input_ids=ids).logits[0, -1].argmax())
            out.append(token)
            if token in stops:
                break
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


def test_hf_generate_ignores_the_checkpoints_sampling_settings() -> None:
    model, tok = _tiny(seed=11)
    prompt = "Question: What is 2 + 3?"
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    stops = stop_token_ids(tok, model.generation_config)
    expected = _greedy_by_hand(model, ids, 12, stops)
    assert len(set(expected)) < len(expected)  # the plain greedy path repeats a token: a penalty would change it
    # what a checkpoint's generation_config.json may carry (Qwen2.5-Instruct: repetition_penalty 1.05-1.1)
    model.generation_config.repetition_penalty = 50.0
    model.generation_config.no_repeat_ngram_size = 1
    roll = generate(model, tok, [prompt], max_prompt_length=32, max_new_tokens=12, temperature=0.0, device=CPU,
                    eos_ids=stops)
    got = roll.completion_ids[0][roll.completion_mask[0].bool()].tolist()
    assert got == expected
    assert model.generation_config.repetition_penalty == 50.0  # the model's own config is left as it was


def test_prompts_cut_to_max_prompt_length_are_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Left truncation drops a task's beginning (the toy code task's constant): it used to happen silently."""
    from gputrain.train.grpo import rollout

    _, tok = _tiny()
    rollout._WARNED_CUT.clear()
    text = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    ids, _ = rollout.tokenize_prompts(tok, [text], n, CPU, add_special_tokens=False)
    assert ids.shape[1] == n and "warning" not in capsys.readouterr().err  # fits exactly: no word
    ids, _ = rollout.tokenize_prompts(tok, [text, "2"], n - 3, CPU, add_special_tokens=False)
    assert ids.shape[1] == n - 3
    assert f"1 of 2 prompts are longer than algorithm.max_prompt_length={n - 3} tokens (longest {n})" \
        in capsys.readouterr().err
    rollout.tokenize_prompts(tok, [text], n - 3, CPU, add_special_tokens=False)
    assert capsys.readouterr().err == ""  # once per run


def test_a_raw_prompt_policy_is_not_given_a_chat_template() -> None:
    """Issue 29: the code CPU profile sent raw prompts to a tiny model that carried a ChatML template."""
    from gputrain.recipe.schema import ModelSpec
    from gputrain.train.grpo.policy import policy_tokenizer

    spec = ModelSpec(name="tiny-qwen2", vocab_size=64)
    raw = policy_tokenizer(spec, ["def f(x): return x"], chat=False)
    assert not raw.chat_template and resolve_prompt_format("auto", raw).mode == "raw"
    assert policy_tokenizer(spec, ["def f(x): return x"]).chat_template  # chat (the default) keeps it
