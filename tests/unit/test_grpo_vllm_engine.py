"""The vLLM rollout engine's parts that need no vLLM: token lists → Rollout, weight names, engine choice, keywords.

vLLM is not installed on these machines (and cannot be: no GPU). Everything here runs for real on CPU; the
engine itself (``VLLMEngine``) is exercised only for its clean failure when vllm cannot be imported.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import ModelSpec

torch = pytest.importorskip("torch")

from gputrain.train.grpo.rollout import (  # noqa: E402
    completion_masks,
    generate,
    pick_engine,
    rollout_from_token_ids,
    tokenize_prompts,
)
from gputrain.train.grpo.vllm_engine import (  # noqa: E402
    VLLMEngine,
    hf_param_name,
    iter_full_weights,
    llm_kwargs,
    model_source,
    sampling_kwargs,
)

EOS, PAD = 1, 0
CPU = torch.device("cpu")
NO_VLLM = importlib.util.find_spec("vllm") is None


def _decode(t: torch.Tensor) -> list[str]:
    return [" ".join(str(int(x)) for x in row) for row in t]


def _tiny(seed: int = 3) -> tuple:
    from gputrain.train.grpo.policy import build_model, train_tiny_tokenizer

    tok = train_tiny_tokenizer(["def f(x):\n    return x+1\n", "assert f(2) == 3\n"] * 8, vocab_size=24)
    model = build_model(ModelSpec(name="tiny-qwen2", hidden_size=32, num_layers=2, num_heads=2), tok, seed=seed)
    return model, tok


# --- token lists → Rollout ------------------------------------------------------------------------------


def test_token_lists_give_hf_padding_and_first_eos_mask() -> None:
    prompts = [[7, 8, 9], [5], [4, 4]]
    completions = [
        [3, 4, EOS],  # EOS last
        [3, EOS, 6, 6, 6],  # EOS mid-sequence: later tokens are masked and become padding
        [2, 2, 2, 2],  # no EOS: truncated, whole row kept
    ]
    roll = rollout_from_token_ids(prompts, completions, eos_ids=EOS, pad_id=PAD, decode=_decode)
    assert roll.prompt_ids.tolist() == [[7, 8, 9], [PAD, PAD, 5], [PAD, 4, 4]]
    assert roll.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert roll.completion_ids.tolist() == [[3, 4, EOS, PAD, PAD], [3, EOS, PAD, PAD, PAD], [2, 2, 2, 2, PAD]]
    assert roll.completion_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]
    assert roll.truncated.tolist() == [False, False, True]
    assert roll.texts == _decode(roll.completion_ids)
    assert roll.input_ids.shape == roll.attention_mask.shape == (3, 8)


def test_mask_matches_completion_masks_on_full_width_rows() -> None:
    rows = [[5, 6, EOS, 7, EOS], [5, 5, 5, 5, 5], [EOS, 9, 9, 9, 9]]
    roll = rollout_from_token_ids([[2]] * 3, rows, eos_ids=EOS, pad_id=PAD, decode=_decode)
    mask, truncated = completion_masks(torch.tensor(rows), EOS)
    assert torch.equal(roll.completion_mask, mask)
    assert torch.equal(roll.truncated, truncated)


def test_empty_completion_is_an_immediate_eos_like_hf() -> None:
    roll = rollout_from_token_ids([[3, 4], [5]], [[], [6, 7]], eos_ids=EOS, pad_id=PAD, decode=_decode)
    assert roll.completion_ids.tolist() == [[EOS, PAD], [6, 7]]
    assert roll.completion_mask.tolist() == [[1, 0], [1, 1]]
    assert roll.truncated.tolist() == [False, True]
    alone = rollout_from_token_ids([[3]], [[]], eos_ids=EOS, pad_id=PAD, decode=_decode)
    assert alone.completion_ids.tolist() == [[EOS]] and alone.completion_mask.tolist() == [[1]]


def test_padding_equal_to_eos_never_counts_as_an_eos() -> None:
    """Tokenizers without a pad token pad with EOS (policy.load_tokenizer): a short row stays truncated."""
    roll = rollout_from_token_ids([[3], [3]], [[6, 6, 6, 6], [6, 6]], eos_ids=EOS, pad_id=EOS, decode=_decode)
    assert roll.completion_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert roll.truncated.tolist() == [True, True]
    assert roll.completion_ids.tolist() == [[6, 6, 6, 6], [6, 6, EOS, EOS]]


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        rollout_from_token_ids([[1], [2]], [[3]], eos_ids=EOS, pad_id=PAD, decode=_decode)


def test_prompts_are_padded_like_the_tokenizer_pads_them() -> None:
    _, tok = _tiny()
    texts = ["def f(x):", "assert f(2) == 3\n", "x"]
    ids, mask = tokenize_prompts(tok, texts, max_len=6, device=CPU)  # truncates the long one on the left
    lists = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
    roll = rollout_from_token_ids(lists, [[EOS]] * 3, eos_ids=tok.eos_token_id, pad_id=tok.pad_token_id, decode=_decode)
    assert torch.equal(roll.prompt_ids, ids) and torch.equal(roll.prompt_mask, mask)


def test_hf_generate_rollout_rebuilt_from_token_lists_is_identical() -> None:
    """What vLLM returns (prompt ids, completion ids up to and including EOS) gives HF's exact Rollout."""
    model, tok = _tiny()
    prompts = ["def f(x):", "assert f(2)", "def f(x):\n    return"] * 4
    seen_eos = seen_truncated = False
    for seed in range(20):
        torch.manual_seed(seed)
        hf = generate(model, tok, prompts, max_prompt_length=16, max_new_tokens=6, temperature=1.0, device=CPU)
        prompt_lists = [row[m.bool()].tolist() for row, m in zip(hf.prompt_ids, hf.prompt_mask, strict=True)]
        completion_lists = [
            row[m.bool()].tolist() for row, m in zip(hf.completion_ids, hf.completion_mask, strict=True)
        ]
        rebuilt = rollout_from_token_ids(
            prompt_lists,
            completion_lists,
            eos_ids=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            decode=lambda t: tok.batch_decode(t, skip_special_tokens=True),
        )
        for field in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "truncated"):
            assert torch.equal(getattr(rebuilt, field), getattr(hf, field)), field
        assert rebuilt.texts == hf.texts
        seen_truncated |= bool(hf.truncated.any())
        seen_eos |= bool((~hf.truncated).any())
        if seen_eos and seen_truncated:
            break
    assert seen_eos and seen_truncated  # both kinds of row were compared


# --- weight names and full weights ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrapped", "hf"),
    [
        ("module.model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        ("_orig_mod.model.norm.weight", "model.norm.weight"),
        ("module._orig_mod.lm_head.weight", "lm_head.weight"),
        ("_orig_mod.module.model.embed_tokens.weight", "model.embed_tokens.weight"),
        (
            "model.layers.1._checkpoint_wrapped_module.self_attn.q_proj.bias",
            "model.layers.1.self_attn.q_proj.bias",
        ),
        (
            "_fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.input_layernorm.weight",
            "model.layers.0.input_layernorm.weight",
        ),
        ("model.adapter_module.weight", "model.adapter_module.weight"),  # "module." inside a name stays
    ],
)
def test_wrapper_prefixes_are_stripped_to_checkpoint_names(wrapped: str, hf: str) -> None:
    assert hf_param_name(wrapped) == hf


def _assert_full_weights_equal_state_dict(weights: dict[str, torch.Tensor], reference: torch.nn.Module) -> None:
    state = reference.state_dict()
    assert set(weights) <= set(state), set(weights) - set(state)
    for name, tensor in weights.items():
        assert torch.equal(tensor, state[name]), name
    missing = set(state) - set(weights)
    # Only tied aliases may be left out (vLLM's loaders skip lm_head when embeddings are tied).
    assert missing == {"lm_head.weight"}
    assert reference.config.tie_word_embeddings


def test_full_weights_of_a_plain_model_are_its_state_dict() -> None:
    model, _ = _tiny()
    weights = dict(iter_full_weights(model))
    _assert_full_weights_equal_state_dict(weights, model)
    assert list(weights) == [n for n, _ in model.named_parameters()]


def test_full_weights_under_torch_compile_and_checkpoint_wrapper_keep_hf_names() -> None:
    import copy

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    model, _ = _tiny()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model)  # an OptimizedModule: names gain "_orig_mod." (nothing compiles until called)
    assert next(n for n, _ in compiled.named_parameters()).startswith("_orig_mod.")
    _assert_full_weights_equal_state_dict(dict(iter_full_weights(compiled)), reference)

    wrapped = copy.deepcopy(reference)
    for i, layer in enumerate(wrapped.model.layers):
        wrapped.model.layers[i] = checkpoint_wrapper(layer)
    assert any("_checkpoint_wrapped_module." in n for n, _ in wrapped.named_parameters())
    _assert_full_weights_equal_state_dict(dict(iter_full_weights(wrapped)), reference)


@pytest.mark.slow
def test_full_weights_under_ddp_and_fsdp2_on_two_gloo_ranks(tmp_path: Path) -> None:
    """Every rank gathers the same full weights, with HF names, from DDP and from FSDP2 ``fully_shard``."""
    worker = Path(__file__).with_name("grpo_vllm_weights_worker.py")
    repo = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1", "GRPO_VLLM_OUT": str(tmp_path)}
    import os

    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(worker)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rep in reports:
        assert rep["fsdp_sharded"] is True  # the weights really were sharded before gathering
        for case in ("ddp", "fsdp", "fsdp_checkpoint_wrapped"):
            assert rep[case]["max_diff"] == 0.0, (rep["rank"], case)
            assert rep[case]["missing"] == ["lm_head.weight"], (rep["rank"], case)
            assert rep[case]["extra"] == [], (rep["rank"], case)
            assert rep[case]["all_full_shape"] is True, (rep["rank"], case)
    for case in ("ddp", "fsdp", "fsdp_checkpoint_wrapped"):
        assert reports[0][case]["names"] == reports[1][case]["names"]  # same order: the gathers pair up


# --- engine choice --------------------------------------------------------------------------------------


CUDA = torch.device("cuda")  # a device descriptor only: nothing is allocated


def test_auto_picks_vllm_only_when_installed_on_cuda_with_a_memory_share() -> None:
    assert pick_engine("auto", CUDA, 0.65, vllm_installed=True)[0] == "vllm"
    engine, note = pick_engine("auto", CPU, 0.65, vllm_installed=True)
    assert engine == "hf" and "no CUDA device" in note
    engine, note = pick_engine("auto", CUDA, 0.65, vllm_installed=False)
    assert engine == "hf" and "not installed" in note and "gputrain[gpu]" in note
    engine, note = pick_engine("auto", CUDA, None, vllm_installed=True)
    assert engine == "hf" and "vllm_gpu_memory_utilization is null" in note
    assert pick_engine("hf", CUDA, 0.65, vllm_installed=True)[0] == "hf"


def test_explicit_vllm_is_chosen_or_refused_in_one_line() -> None:
    engine, note = pick_engine("vllm", CUDA, 0.3, vllm_installed=True)
    assert engine == "vllm" and "0.3" in note
    with pytest.raises(GputrainError) as err:
        pick_engine("vllm", CUDA, 0.3, vllm_installed=False)
    assert str(err.value) == (
        "algorithm.rollout_engine=vllm: vLLM is not installed (pip install 'gputrain[gpu]'); "
        "or set algorithm.rollout_engine: hf"
    )
    with pytest.raises(GputrainError, match="needs a CUDA GPU and this rank runs on cpu; or set") as err:
        pick_engine("vllm", CPU, 0.3, vllm_installed=True)
    with pytest.raises(GputrainError, match="vllm_gpu_memory_utilization is null"):
        pick_engine("vllm", CUDA, None, vllm_installed=True)
    with pytest.raises(GputrainError) as err:
        pick_engine("vllm", CPU, 0.3, vllm_installed=False)
    assert "\n" not in str(err.value) and "not installed" in str(err.value) and "CUDA" in str(err.value)


@pytest.mark.skipif(not NO_VLLM, reason="checks this machine's real state: vllm absent")
def test_on_this_machine_auto_is_hf_and_vllm_is_refused() -> None:
    assert pick_engine("auto", CPU, 0.65)[0] == "hf"
    assert pick_engine("auto", CUDA, 0.65)[0] == "hf"
    with pytest.raises(GputrainError, match=r"pip install 'gputrain\[gpu\]'"):
        pick_engine("vllm", CUDA, 0.65)


@pytest.mark.skipif(not NO_VLLM, reason="checks the failure without vllm")
def test_engine_without_vllm_fails_with_the_install_hint(tmp_path: Path) -> None:
    model, tok = _tiny()
    with pytest.raises(GputrainError, match=r"cannot import vllm .*pip install 'gputrain\[gpu\]'"):
        VLLMEngine(
            model,
            tok,
            workdir=tmp_path,
            precision="bf16",
            gpu_memory_utilization=0.3,
            max_model_len=64,
            seed=0,
            rank=0,
            local_rank=0,
            world_size=1,
        )


@pytest.mark.slow  # a fresh interpreter importing torch: 3-5 s
def test_importing_the_engine_module_does_not_import_vllm() -> None:
    code = "import sys, gputrain.train.grpo.vllm_engine, gputrain.train.grpo.trainer; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- keywords for vLLM ----------------------------------------------------------------------------------


def test_sampling_keywords_follow_hf_sampling() -> None:
    assert sampling_kwargs(temperature=0.9, top_p=0.95, top_k=20, max_tokens=256, eos_ids=7) == {
        "n": 1,
        "temperature": 0.9,
        "top_p": 0.95,
        "top_k": 20,
        "max_tokens": 256,
        "stop_token_ids": [7],
        "ignore_eos": True,  # exactly the run's stop ids, never vLLM's own EOS bookkeeping
        "detokenize": False,
        "logprobs": 0,  # the sampled token's log-prob, for the IS correction
    }
    two = sampling_kwargs(temperature=1.0, top_p=1.0, top_k=None, max_tokens=8, eos_ids=[7, 9])
    assert two["stop_token_ids"] == [7, 9]
    greedy = sampling_kwargs(temperature=0.0, top_p=0.5, top_k=5, max_tokens=8, eos_ids=7)
    assert (greedy["temperature"], greedy["top_p"], greedy["top_k"]) == (0.0, 1.0, -1)
    assert sampling_kwargs(temperature=1.0, top_p=1.0, top_k=None, max_tokens=8, eos_ids=7)["top_k"] == -1
    grouped = sampling_kwargs(temperature=1.0, top_p=1.0, top_k=None, max_tokens=8, eos_ids=7, n=8, seed=3)
    assert (grouped["n"], grouped["seed"]) == (8, 3)
    assert "seed" not in sampling_kwargs(temperature=1.0, top_p=1.0, top_k=None, max_tokens=8, eos_ids=7)


def test_engine_keywords_are_colocated_and_drop_only_optional_unknowns() -> None:
    common = {"load_format": "auto", "gpu_memory_utilization": 0.65, "max_model_len": 1024 + 256, "seed": 5}
    kwargs, notes = llm_kwargs("Qwen/Qwen2.5-1.5B", precision="fp16", sleep_mode=True, **common)
    assert kwargs == {
        "model": "Qwen/Qwen2.5-1.5B",
        "load_format": "auto",
        "dtype": "float16",
        "gpu_memory_utilization": 0.65,
        "max_model_len": 1280,
        "seed": 5,
        "tensor_parallel_size": 1,
        "distributed_executor_backend": "external_launcher",
        "enable_sleep_mode": True,
        "generation_config": "vllm",
        "logprobs_mode": "processed_logprobs",
    }
    assert notes == []
    old = set(kwargs) - {"enable_sleep_mode", "generation_config", "logprobs_mode"}
    kwargs, notes = llm_kwargs("m", precision="bf16", sleep_mode=True, supported=old, **common)
    assert kwargs["dtype"] == "bfloat16" and "enable_sleep_mode" not in kwargs and "generation_config" not in kwargs
    assert notes == ["sleep mode not supported by this vLLM: the engine stays awake while training",
                     "no logprobs_mode in this vLLM: its log-probs are raw, the IS correction is off"]
    with pytest.raises(GputrainError, match="distributed_executor_backend"):
        llm_kwargs("m", precision="bf16", sleep_mode=False, supported=old - {"distributed_executor_backend"}, **common)
    with pytest.raises(GputrainError, match="unknown precision"):
        llm_kwargs("m", precision="int8", sleep_mode=False, **common)


def test_config_built_model_gets_a_config_and_tokenizer_folder(tmp_path: Path) -> None:
    model, tok = _tiny()
    source, load_format = model_source(model, tok, tmp_path / "vllm_model_rank0")
    assert load_format == "dummy"
    files = {p.name for p in Path(source).iterdir()}
    assert {"config.json", "tokenizer.json"} <= files
    assert not any(f.endswith((".safetensors", ".bin")) for f in files)  # weights come by sync, not disk
    model.config._name_or_path = "Qwen/Qwen2.5-0.5B"
    assert model_source(model, tok, tmp_path / "unused") == ("Qwen/Qwen2.5-0.5B", "auto")


def test_sleep_mode_is_a_recipe_switch_off_by_default() -> None:
    assert GRPOAlgorithm().vllm_sleep_mode is False
    assert GRPOAlgorithm(vllm_sleep_mode=True, rollout_engine="vllm").vllm_sleep_mode is True
