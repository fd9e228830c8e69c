"""Math RL pieces for the grpo_math and gdpo entrypoints: answers (math-verify), reward components,
datasets (GSM8K, MATH, DeepScaleR, generated arithmetic) and evaluation.

Light at import: math-verify, datasets and pyarrow load only when a function needs them.
"""
