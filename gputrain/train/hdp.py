"""HDP: hierarchical block diffusion — Question (clean) → Plan → Execution, 128 + 128 + 256 tokens.

Launch (via ``gputrain run recipes/hdp_diffusion.yaml``, which writes plan.json)::

    torchrun --nproc_per_node 2 -m gputrain.train.hdp --plan JOB/plan.json --job-dir JOB

The design (why the question is never noised, how plan-before-execution is enforced, what is reported)
is in ``gputrain.train.diffusion.hierarchy``. Metrics add ``loss_plan``/``loss_exec`` (training, t clipped
to [β, ω]) and the NELBO per token ``val_nelbo_plan``/``val_nelbo_exec`` (held out, t over all of [0, 1]);
samples are prompted with held-out questions and scored on their final answer.
"""

from __future__ import annotations

from typing import Any

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.schema import ModelSpec
from gputrain.train.diffusion.data import Tokenizer
from gputrain.train.diffusion.hierarchy import encode_hdp, hdp_layout
from gputrain.train.diffusion.trainer import Task, answer_matches, run
from gputrain.train.runtime import RunContext, run_entrypoint


def hdp_task(algo: DiffusionAlgorithm, model: ModelSpec) -> Task:
    q, p, e = algo.question_len, algo.plan_len, algo.exec_len
    seq_len = model.seq_len
    if seq_len is not None and seq_len != q + p + e:
        raise GputrainError(f"model.seq_len {seq_len} differs from question_len + plan_len + exec_len = "
                            f"{q + p + e}")

    def encode(tok: Tokenizer, row: dict[str, str]) -> list[int]:
        return encode_hdp(tok, row, q, p, e)

    def describe(tok: Tokenizer, ids: list[int], row: dict[str, str]) -> dict[str, Any]:
        def cut(part: list[int]) -> str:
            return tok.decode(part[: part.index(tok.eos_id)] if tok.eos_id in part else part)

        execution = cut(ids[q + p :])
        return {"question": row["question"], "plan": cut(ids[q : q + p]), "execution": execution,
                "reference": row["answer"], "correct": answer_matches(execution, row)}

    def prompt(tok: Tokenizer, row: dict[str, str]) -> tuple[list[int], list[bool]]:
        return encode_hdp(tok, row, q, p, e), [True] * q + [False] * (p + e)

    return Task("hdp", hdp_layout(q, p, e, algo.plan_block, algo.exec_block), encode, describe, prompt)


def main(ctx: RunContext) -> int:
    return run(ctx, hdp_task)


if __name__ == "__main__":
    run_entrypoint(main)
