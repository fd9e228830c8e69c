"""GSM8K-format data (``question``, ``answer`` ending in ``#### <number>``) and tokenizers.

Sources: a local JSON / JSONL / Parquet file, a Hugging Face hub name (when online), or ``generated``: a
seeded generator of arithmetic word problems in the same format, with GSM8K's ``<<a+b=c>>`` calculator
annotations, so tests and the ``cpu`` profile need no network and no files.

Tokenizer: GPT-2's when it is already on disk (never downloaded here), else a byte-level tokenizer that
needs no files. Both get an extra [MASK] id at the end of the vocabulary; end-of-text doubles as padding.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gputrain.errors import GputrainError


class Tokenizer(Protocol):
    vocab_size: int  # including [MASK]
    mask_id: int
    eos_id: int
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes 0..255, then end-of-text (256) and [MASK] (257)."""

    name = "bytes"
    eos_id = 256
    mask_id = 257
    vocab_size = 258

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class GPT2Tokenizer:
    """GPT-2 BPE from the local Hugging Face cache, with [MASK] appended as id 50257."""

    name = "gpt2"

    def __init__(self, revision: str | None = None) -> None:
        from transformers import AutoTokenizer

        # revision: the commit ``gputrain prepare`` pinned (offline clusters); never a download either way
        self._tok = AutoTokenizer.from_pretrained("gpt2", local_files_only=True, revision=revision)
        self.eos_id = int(self._tok.eos_token_id)
        self.mask_id = len(self._tok)
        self.vocab_size = self.mask_id + 1

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode([i for i in ids if i < self.mask_id]))


def load_tokenizer(kind: str = "auto", revision: str | None = None) -> Tokenizer:
    """``gpt2`` (local files), ``bytes``, or ``auto``: GPT-2 if it is on disk, bytes otherwise (the run's
    log says which: the vocabulary changes every NELBO figure)."""
    if kind == "bytes":
        return ByteTokenizer()
    try:
        return GPT2Tokenizer(revision)
    except (OSError, ValueError, ImportError) as exc:
        if kind == "gpt2":
            raise GputrainError(f"tokenizer gpt2: not available locally ({type(exc).__name__})") from None
        return ByteTokenizer()


NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kai", "Lena"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "stamps"]


def generate_problems(count: int, seed: int) -> list[dict[str, str]]:
    """Arithmetic word problems with GSM8K's answer format; the same seed gives the same problems."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
        kind = rng.randrange(3)
        if kind == 0:
            total = a + b
            q = f"{name} has {a} {item} and finds {b} more. How many {item} does {name} have now?"
            steps = [f"{name} has {a}+{b}=<<{a}+{b}={total}>>{total} {item}."]
        elif kind == 1:
            bigger, smaller = max(a, b), min(a, b)
            total = (bigger - smaller) * c
            q = (f"{name} had {bigger} {item} and gave away {smaller}. Each one left is worth {c} dollars. "
                 f"How many dollars are the {item} worth?")
            steps = [f"{name} kept {bigger}-{smaller}=<<{bigger}-{smaller}={bigger - smaller}>>"
                     f"{bigger - smaller} {item}.",
                     f"They are worth {bigger - smaller}*{c}=<<{bigger - smaller}*{c}={total}>>{total} dollars."]
        else:
            total = a * c + b
            q = f"{name} buys {c} boxes of {a} {item} and gets {b} extra {item}. How many {item} in total?"
            steps = [f"The boxes hold {c}*{a}=<<{c}*{a}={a * c}>>{a * c} {item}.",
                     f"With the extra ones that is {a * c}+{b}=<<{a * c}+{b}={total}>>{total} {item}."]
        out.append({"question": q, "answer": "\n".join(steps) + f"\n#### {total}"})
    return out


def load_gsm8k(source: str, split: str, fmt: str = "auto") -> list[dict[str, str]]:
    """Rows with ``question`` and ``answer`` from a file or a hub dataset name."""
    path = Path(source)
    if path.exists():
        kind = fmt if fmt not in ("auto", "generated") else path.suffix.lstrip(".").lower()
        try:
            if kind == "parquet":
                import pyarrow.parquet as pq

                rows = pq.read_table(path).to_pylist()
            elif kind == "jsonl":
                rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            elif kind == "json":
                data = json.loads(path.read_text())
                rows = data.get(split, data.get("data", [])) if isinstance(data, dict) else data
            else:
                raise GputrainError(f"data.source {source}: unknown format {kind!r} (json, jsonl, parquet)")
        except (ValueError, OSError, ImportError) as exc:  # JSON and Arrow parse errors are ValueErrors
            raise GputrainError(f"data.source {source}: cannot read ({exc})") from None
        if not isinstance(rows, list):
            raise GputrainError(f"data.source {source}: expected a list of rows, got {type(rows).__name__}")
    else:
        try:
            import datasets

            rows = list(datasets.load_dataset(source, "main", split=split))
        except Exception as exc:  # the hub raises many types; the message is what matters
            raise GputrainError(f"data.source {source}: not a file and not loadable from the hub "
                                f"({type(exc).__name__})") from None
    bad = [i for i, r in enumerate(rows) if not isinstance(r, dict) or "question" not in r or "answer" not in r]
    if bad:
        raise GputrainError(f"data.source {source}: row {bad[0]} lacks 'question'/'answer'")
    return [{"question": str(r["question"]), "answer": str(r["answer"])} for r in rows]


def final_answer(answer: str) -> str | None:
    m = re.search(r"####\s*(-?[\d,\.]+)", answer)
    return m.group(1).replace(",", "") if m else None


def plan_of(answer: str) -> str:
    """HDP's plan: the calculator annotations in order, else the answer's first line."""
    calcs = re.findall(r"<<([^>]*)>>", answer)
    return "; ".join(calcs) if calcs else answer.splitlines()[0]


@dataclass
class Segment:
    text: str
    length: int


def encode_fixed(tok: Tokenizer, segments: list[Segment]) -> list[int]:
    """Each segment truncated or padded with end-of-text to its length, then concatenated."""
    ids: list[int] = []
    for seg in segments:
        enc = [*tok.encode(seg.text)[: seg.length - 1], tok.eos_id]
        ids.extend(enc + [tok.eos_id] * (seg.length - len(enc)))
    return ids
