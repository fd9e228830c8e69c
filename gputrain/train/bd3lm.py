"""BD3-LM block diffusion language model on GSM8K-format text (Arriola et al., ICLR 2025).

Launch (via ``gputrain run recipes/bd3lm_gsm8k.yaml``, which writes plan.json)::

    torchrun --nproc_per_node 2 -m gputrain.train.bd3lm --plan JOB/plan.json --job-dir JOB

Each sequence is "Question: …\\nAnswer: …" and one end-of-text, padded with end-of-text to ``model.seq_len``
tokens and split into blocks of ``algorithm.block_size``; the padding is not scored (``objective.real_tokens``).
Samples are prompted with held-out questions ("Question: …\nAnswer:", at most three quarters of the
sequence; the block it ends in is completed by the model) and scored on their final answer. Design and
sources: ``gputrain.train.diffusion``.
"""

from __future__ import annotations

from typing import Any

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.schema import ModelSpec
from gputrain.train.diffusion.data import Segment, Tokenizer, encode_fixed, final_answer
from gputrain.train.diffusion.objective import Layout
from gputrain.train.diffusion.trainer import Task, answer_matches, run
from gputrain.train.runtime import RunContext, required, run_entrypoint


def bd3lm_task(algo: DiffusionAlgorithm, model: ModelSpec) -> Task:
    n = required(model.seq_len, "model.seq_len")
    if n % algo.block_size:
        raise GputrainError(f"model.seq_len {n} is not a multiple of algorithm.block_size {algo.block_size}")

    def encode(tok: Tokenizer, row: dict[str, str]) -> list[int]:
        return encode_fixed(tok, [Segment(f"Question: {row['question']}\nAnswer: {row['answer']}", n)])

    def prompt(tok: Tokenizer, row: dict[str, str]) -> tuple[list[int], list[bool]]:
        head = tok.encode(f"Question: {row['question']}\nAnswer:")[: 3 * n // 4]
        return head + [tok.eos_id] * (n - len(head)), [True] * len(head) + [False] * (n - len(head))

    def describe(tok: Tokenizer, ids: list[int], row: dict[str, str]) -> dict[str, Any]:
        text = tok.decode(ids[: ids.index(tok.eos_id)] if tok.eos_id in ids else ids)
        return {"text": text, "reference": row["answer"], "has_final_answer": final_answer(text) is not None,
                "correct": answer_matches(text, row)}

    return Task("bd3lm", Layout.bd3(n, algo.block_size), encode, describe, prompt)


def main(ctx: RunContext) -> int:
    return run(ctx, bd3lm_task)


if __name__ == "__main__":
    run_entrypoint(main)
