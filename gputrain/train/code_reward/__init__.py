"""Code-execution reward for GRPO: MBPP/HumanEval/toy tasks, prompts, code extraction, sandboxed scoring.

    from gputrain.train.code_reward import load_mbpp, build_prompt, score_completions
    tasks = load_mbpp()                                  # the shipped sample; or a path / "mbpp"
    prompts = [build_prompt(t) for t in tasks]
    rewards = score_completions(completions, tasks, workers=4)
"""

from gputrain.train.code_reward.extract import build_prompt, completion_text, extract_code, program_for
from gputrain.train.code_reward.reward import (
    CompletionScore,
    score_completions,
    score_completions_detailed,
    trl_reward_function,
)
from gputrain.train.code_reward.tasks import SAMPLE_MBPP, CodeTask, load_humaneval, load_mbpp, normalize_task
from gputrain.train.code_reward.toy import TOY_ALPHABET, toy_tasks

__all__ = [
    "SAMPLE_MBPP",
    "TOY_ALPHABET",
    "CodeTask",
    "CompletionScore",
    "build_prompt",
    "completion_text",
    "extract_code",
    "load_humaneval",
    "load_mbpp",
    "normalize_task",
    "program_for",
    "score_completions",
    "score_completions_detailed",
    "toy_tasks",
    "trl_reward_function",
]
