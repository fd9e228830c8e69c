"""Parsers of the metric line formats that training libraries really print, one function per format.

Each takes one line's text (launcher prefixes, ANSI colours and superseded ``\\r`` updates already removed by
:mod:`gputrain.logs.parse`) and returns a :class:`~gputrain.logs.parse.LogRecord` or None. The shapes, as
the libraries print them (fixtures produced by running each: ``tests/fixtures/logs/``):

- transformers ``Trainer`` and TRL trainers: ``{'loss': '3.22', 'grad_norm': '1.242', 'epoch': '0.1562'}``
  (5.x formats floats as strings with ``.4g``; 4.x printed floats); ``{'train_runtime': ...}`` at the end.
- verl's console logger: ``step:3 - actor/pg_loss:np.float64(0.02) - critic/score/mean:0.41``.
- gputrain and nanochat: ``step 120/1000 | loss 2.31 | lr 3e-04`` / ``step 00100/01000 (10.00%) | loss: 2.3``.
- tqdm bars (``45/60 [00:01<00:00, 40.2it/s, loss=0.5]``), Lightning's tqdm bar (``Epoch 2: ...``) and its
  rich bar (``Epoch 2/2 ━━━ 10/10 0:00:00 • 0:00:00 616.25it/s train_loss: 0.053``).
- torchtitan ``step: 10  loss:  8.1234  memory: 31.20GiB(39.42%)  tps: 1,234  mfu: 12.48%``, nanoGPT
  ``iter 100: loss 2.31, time 123.45ms, mfu 30.00%`` and ``step 100: train loss 2.1, val loss 2.2``.
- DeepSpeed ``step=10, skipped=0, lr=[0.001], mom=[...]`` and its throughput timer
  ``epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...``.
- vLLM ``Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s, Running: 3 reqs``.
"""

from __future__ import annotations

import functools
import json
import math
import re

from gputrain.logs.record import LogRecord
from gputrain.logs.schema import validate_record

#: A number as logs print it, NaN and infinities included: a diverged run must show as diverged, not vanish.
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+|nan|NaN|inf|Inf)(?:[eE][-+]?\d+)?"

#: Other tools' names for the standard metric keys.
ALIASES = {
    "learning_rate": "lr", "global_step": "step", "train/loss": "loss", "train/learning_rate": "lr",
    "actor/lr": "lr", "tok/sec": "tokens_per_s", "tps": "tokens_per_s", "train_samples_per_second": "samples_per_s",
    "train_step_timing_s": "step_time_s",
}
#: A rate written as ``what/sec`` (MLX's "It/sec", "Tokens/sec"; "tok/s", "samples/s"): the standard key of its unit.
_RATE_KEY_RE = re.compile(r"^([A-Za-z]+?)s?(?:/|_per_)(?:sec|s|second)(?P<per>/device|/gpu|_per_(?:device|gpu))?$",
                          re.IGNORECASE)
_RATE_OF = {"it": "steps_per_s", "iter": "steps_per_s", "iteration": "steps_per_s", "step": "steps_per_s",
            "batch": "steps_per_s", "tok": "tokens_per_s", "token": "tokens_per_s", "sample": "samples_per_s",
            "seq": "samples_per_s", "sequence": "samples_per_s", "example": "samples_per_s"}
#: A key that says its unit in words (NeMo's "train_step_timing in s"): ``train_step_timing_s``.
_IN_UNIT_RE = re.compile(r"^(.+?) in (m?s)$")


@functools.lru_cache(maxsize=4096)
def canonical_key(key: str) -> str:
    """The standard name of a metric key as another tool writes it (:data:`ALIASES`, a ``what/sec`` rate, a
    ``name in s`` unit). Cached: a log repeats the same few keys millions of times."""
    alias = ALIASES.get(key)
    if alias is not None:
        return alias
    rate = _RATE_KEY_RE.match(key)
    if rate:
        standard = _RATE_OF.get(rate.group(1).lower())
        return key if standard is None else standard + ("_per_gpu" if rate.group("per") else "")
    unit = _IN_UNIT_RE.match(key)
    if unit:
        key = f"{unit.group(1)}_{unit.group(2)}"
        return ALIASES.get(key, key)
    return key

_NUM_RE = re.compile(rf"^\s*(?:np\.float\d*\(|np\.int\d*\(|tensor\()?({NUM})\)?\s*$")
_HF_ITEM_RE = re.compile(r"'([A-Za-z_][^'\s]*)': '?([-+.\deE]+|-?nan|-?inf)'?(?=[,}])")  # simple classes: 2x faster
_VERL_RE = re.compile(r"step:\s*(\d+)\s+-\s+")
_OURS_HEAD_RE = re.compile(r"^step[: ]\s*(\d+)(?:/(\d+))?(?:\s*\([\d.]+%\))?:?$")
_TQDM_RE = re.compile(
    r"(?:(?P<desc>[^|]*?):\s*)?(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<remain>[\d:?]+),\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>it/s|s/it)?(?P<post>[^\]]*)\]"
)
_RICH_BAR_RE = re.compile(
    r"^Epoch (?P<epoch>\d+)/(?P<epochs>\d+)\s+\S*\s*(?P<n>\d+)/(?P<total>\d+)\s+[\d:]+\s+•\s+[-\d:]+\s+"
    r"(?P<rate>[\d.]+)(?P<unit>it/s|s/it)\s*(?P<post>.*)$"
)
_POSTFIX_RE = re.compile(rf"[,\s]([A-Za-z_][\w./-]*(?: in m?s(?=[=:]))?)[=:]\s*({NUM})")
_KV_RE = re.compile(
    rf"(?:^|(?<=[\s,|;(\[]))([A-Za-z_][\w./-]*(?: in m?s(?=\s*[=:]))?)(?:\s*[=:]\s*|\s+)({NUM}(?:,\d{{3}})*)"
    rf"(ms|s|%| ?GiB| ?GB)?(?![\w.])"
)
_NANOGPT_EVAL_RE = re.compile(rf"^step (\d+): train loss ({NUM}), val loss ({NUM})")
_DS_STEP_RE = re.compile(rf"step=(\d+), skipped=(\d+), lr=\[({NUM})")
_DS_TPUT_RE = re.compile(r"global_step=(\d+), RunningAvgSamplesPerSec=([\d.]+), CurrSamplesPerSec=([\d.]+)")
_VLLM_RE = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs(?:, GPU KV cache usage: ([\d.]+)%)?"
)
_DS_TIME_RE = re.compile(r"^\[Rank (\d+)\] time \(ms\) \| (.*)$")
_STEP_KEYS = frozenset({"step", "iter", "iteration", "global_step", "it"})
_EVAL_BARS = ("Validation", "Sanity", "Testing", "Predicting", "Evaluat")
_EPOCH_RE = re.compile(r"Epoch (\d+)")
_EPOCH_STEP_RE = re.compile(r"(?:^|\s)(\d+)\|(\d+)\|$")
_CASED_KEYS = frozenset({"loss", "lr", "accuracy", "acc", "epoch"})
#: Metric names written as two words, the value after the second ("Learning Rate 1e-5", "Grad Norm: 0.95").
_COMPOUNDS = {("learning", "rate"): "lr", ("grad", "norm"): "grad_norm", ("gradient", "norm"): "grad_norm"}
_SECOND_WORDS = frozenset(second for _, second in _COMPOUNDS)
#: Megatron-LM / Megatron-DeepSpeed: `` iteration   5426/  250000 | lm loss: 2.3 | grad norm: nan |``
_PIPE_FIELD_RE = re.compile(rf"^\s*([A-Za-z][\w ./-]*?)\s*:\s*({NUM})\s*$")
_PIPE_HEAD_RE = re.compile(r"^\s*iteration\s+(\d+)\s*/\s*(\d+)\s*$")
_PIPE_KEYS = {"lm_loss": "loss", "learning_rate": "lr", "elapsed_time_per_iteration_(ms)": "step_time_ms"}
#: Megatron's evaluation line: `` validation loss at iteration 150 on test set | lm loss value: 1.1E+01 | lm loss PPL:
#: 1.3E+05 |`` (also "at the end of training for val data"): the split's loss and perplexity.
_PIPE_EVAL_RE = re.compile(r"^\s*validation loss at (?:iteration (\d+))?")


def finite(text: str) -> float | None:
    """``'3.2'``, ``'1,234'``, ``np.float64(0.5)``, ``nan``, ``inf`` → float; text → None.

    NaN and infinities are values: a metric that went NaN is the most important thing a summary can say
    (:class:`gputrain.logs.stats.MetricStats` counts them apart from min/max/best).
    """
    try:
        return float(text)
    except ValueError:
        match = _NUM_RE.match(text.replace(",", ""))
        if not match:
            return None
        return float(match.group(1))


def _record(fmt: str, text: str, values: dict[str, float], step: int | None = None, total: int | None = None,
            kind: str = "metrics") -> LogRecord:
    return LogRecord(kind, text, fmt=fmt, step=step, total=total, values=values)


def parse_json(text: str) -> LogRecord | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    record = validate_record(obj)
    if record is not None:
        values = {k: float(v) for k, v in record.items() if k not in ("step", "time")}
        out = _record("jsonl", text, values, step=int(record["step"]))
        out.time = float(record["time"])
        return out
    values = {}
    for key, value in obj.items():
        if isinstance(key, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
            values[ALIASES.get(key, key)] = float(value)
        elif isinstance(key, str) and isinstance(value, str) and len(value) < 32:  # fairseq: "train_loss": "506.1"
            number = finite(value)
            if number is not None:
                values[ALIASES.get(key, key)] = number
    if not values:
        return None
    step = values.pop("step", None)
    return _record("json", text, values, step=int(step) if step is not None and math.isfinite(step) else None)


def parse_hf(text: str) -> LogRecord | None:
    """The Trainer's log dict: a regex, not ``ast.literal_eval`` (40x slower); NaN/inf values are kept."""
    get = ALIASES.get
    pairs = _HF_ITEM_RE.findall(text, 0, 16384)
    try:
        values = {get(key, key): float(raw) for key, raw in pairs}
    except ValueError:  # "1.2.3", "e": the character class is loose, float() decides
        values = {get(key, key): number for key, raw in pairs if (number := finite(raw)) is not None}
    if not values:
        return None
    step = values.pop("step", None)
    return _record("hf", text, values, step=int(step) if step is not None and math.isfinite(step) else None)


def parse_verl(text: str, match: re.Match[str]) -> LogRecord:
    values: dict[str, float] = {}
    for part in text[match.end() :].split(" - "):
        key, sep, raw = part.partition(":")
        key = key.strip()
        number = finite(raw) if sep and key else None
        if number is not None:
            values[ALIASES.get(key, key)] = number
    return _record("verl", text, values, step=int(match.group(1)))


def parse_ours(text: str) -> LogRecord | None:
    """``step 120/1000 | loss 2.31`` (gputrain) and ``step 00100/01000 (10.00%) | loss: 2.3 | dt: 12ms`` (nanochat)."""
    head, *parts = text.rstrip().split(" | ")
    match = _OURS_HEAD_RE.match(head)
    if match is None or not parts:
        return None
    values: dict[str, float] = {}
    for part in parts:
        key, _, raw = part.partition(" ")
        key = key.rstrip(":")
        unit = ""
        for suffix in ("ms", "s", "m", "%"):
            if raw.endswith(suffix) and raw[: -len(suffix)].rstrip()[-1:].isdigit():
                raw, unit = raw[: -len(suffix)], suffix
                break
        number = finite(raw.strip())
        if number is not None and key:
            name = canonical_key(key)
            values[f"{name}_{unit}" if unit in ("ms", "m") else name] = number
    total = int(match.group(2)) if match.group(2) else None
    return _record("gputrain", text, values, step=int(match.group(1)), total=total)


def parse_tqdm(text: str, match: re.Match[str]) -> LogRecord:
    desc = (match.group("desc") or "").strip()
    values: dict[str, float] = {}
    rate = match.group("rate")
    if rate and rate != "?":
        r = float(rate)
        if match.group("unit") == "s/it":
            r = 1.0 / r if r > 0 else 0.0
        values["steps_per_s"] = r
    for key, raw in _POSTFIX_RE.findall(match.group("post") or ""):
        number = finite(raw)
        if key != "v_num" and number is not None:
            values[canonical_key(key)] = number
    if ":" in desc:  # a description that carries values (torchtune: "1|12|Loss: 1.043"), read as the postfix is
        for key, raw in _POSTFIX_RE.findall(" " + desc):
            number = finite(raw)
            if number is not None:
                values[key.lower() if key.lower() in _CASED_KEYS else canonical_key(key)] = number
    n, total = int(match.group("n")), int(match.group("total"))
    counted = _EPOCH_STEP_RE.search(text, 0, match.start()) if desc and text[match.start() - 1:match.start()] == "|" \
        else None
    # A bar is training unless its name says otherwise (data loading, tokenizing); fairseq-style "epoch 001"
    # and a bar that shows a loss are training whatever they are called.
    low = desc.lower()
    training = (not desc or low.startswith("epoch") or any(w in low for w in ("train", "step", "iter"))
                or any("loss" in key.lower() for key in values))
    if desc.startswith(_EVAL_BARS) or not training:  # data loading, tokenizing, evaluation bars
        return _record("tqdm", text, {}, kind="text")
    fmt, step = "tqdm", n
    epoch = _EPOCH_RE.match(desc)
    if counted:  # torchtune's "{epoch}|{global step}|" before its description: the step is the global one
        values["epoch"], step = float(counted.group(1)), int(counted.group(2))
    elif epoch:  # Lightning: n/total counts batches within the epoch
        fmt = "lightning"
        values["epoch"] = float(epoch.group(1))
        step = int(epoch.group(1)) * total + n
        total = 0
    kind = "progress" if set(values) <= {"steps_per_s"} else "metrics"
    return _record(fmt, text, values, step=step, total=total or None, kind=kind)


def parse_rich_bar(text: str) -> LogRecord | None:
    match = _RICH_BAR_RE.match(text)
    if match is None:
        return None
    rate = float(match.group("rate"))
    values = {"steps_per_s": rate if match.group("unit") == "it/s" else (1 / rate if rate else 0.0)}
    for key, raw in _POSTFIX_RE.findall(" " + match.group("post")):
        number = finite(raw)
        if number is not None and key != "v_num":
            values[canonical_key(key)] = number
    epoch, n, total = int(match.group("epoch")), int(match.group("n")), int(match.group("total"))
    values["epoch"] = float(epoch)
    return _record("lightning", text, values, step=epoch * total + n)


def parse_special(text: str) -> LogRecord | None:
    """DeepSpeed, vLLM and nanoGPT's evaluation line: fixed shapes that the generic key/value parser gets wrong."""
    if text.startswith("[Rank ") and "time (ms)" in text:
        match = _DS_TIME_RE.match(text)
        if match:
            values = {}
            for part in match.group(2).split(" | "):
                key, _, raw = part.partition(": ")
                number = finite(raw)
                if number is not None and key and "microstep" not in key:
                    values[f"deepspeed/{key}_ms"] = number
            record = _record("deepspeed", text, values) if values else None
            if record is not None:
                record.rank = int(match.group(1))
            return record
    if "skipped=" in text:
        match = _DS_STEP_RE.search(text)
        if match:
            return _record("deepspeed", text, {"lr": float(match.group(3))}, step=int(match.group(1)))
    if "SamplesPerSec" in text:
        match = _DS_TPUT_RE.search(text)
        if match:
            values = {"samples_per_s": float(match.group(2))}
            return _record("deepspeed", text, values, step=int(match.group(1)))
    if "Avg prompt throughput" in text:
        match = _VLLM_RE.search(text)
        if match:
            values = {
                "vllm/prompt_tokens_per_s": float(match.group(1)), "vllm/gen_tokens_per_s": float(match.group(2)),
                "vllm/running_reqs": float(match.group(3)), "vllm/waiting_reqs": float(match.group(4)),
            }
            if match.group(5):
                values["vllm/kv_cache_pct"] = float(match.group(5))
            return _record("vllm", text, values)
    match = _NANOGPT_EVAL_RE.match(text)
    if match:
        values = {"loss": float(match.group(2)), "eval_loss": float(match.group(3))}
        return _record("kv", text, values, step=int(match.group(1)))
    return None


#: What makes a ``key value`` line a metric line without a step: a loss, reward, cross-entropy, perplexity or accuracy.
_MEASURE_RE = re.compile(r"loss|reward|xent|ppl|perplexity|nll|acc")
#: The word before a measure that names its split: ``val loss 0.6`` is another series than ``train loss 0.5`` (which
#: is the loss), as HF's ``eval_loss`` and Keras's ``val_loss`` are; "Learning Rate 1e-5" (MLX) is the lr.
_SPLIT_WORDS = {"val": "val", "valid": "val", "validation": "val", "eval": "eval", "evaluation": "eval",
                "test": "test", "train": "", "training": ""}


def _split_of(text: str, start: int) -> str | None:
    """The split word right before ``text[start:]`` ("Val Loss: 0.4" → "val"), "" for train, None for none."""
    before = text[max(0, start - 12):start].rstrip(" :")
    if not before[-1:].isalpha():
        return None
    return _SPLIT_WORDS.get(before.rsplit(None, 1)[-1].lower())


def parse_kv(text: str) -> LogRecord | None:
    """Generic ``key value`` / ``key: value`` / ``key=value`` lines (nanoGPT, torchtitan and the like)."""
    values: dict[str, float] = {}
    step: int | None = None
    cursor = 0  # where the last measure's name was found: findall is faster than finditer and keys come in order
    for key, raw, unit in _KV_RE.findall(text):
        unit = unit.lstrip()
        written, low = key, key.lower()
        raw = raw.replace(",", "")
        if low in _STEP_KEYS and step is None and raw.isdigit():  # not "1e5": int() would raise
            step = int(raw)
            continue
        number = finite(raw)
        if number is None:
            continue
        if low == "time" and unit in ("ms", "s"):
            key = f"step_time_{unit}"
        elif low in _CASED_KEYS:  # "Loss 0.51" (CGCNN, Keras-style prints) is the loss
            key = low
        elif low in ("memory", "mem", "peak") and unit in ("GiB", "GB"):  # MLX: "Peak mem 9.707 GB"
            key = "gpu_mem_gib"
        elif low in _SECOND_WORDS:  # "Learning Rate 1e-5" (MLX), "Grad Norm: 0.95": two words, one metric
            at = text.find(written, cursor)
            before = text[max(0, at - 10):at].split()
            key = _COMPOUNDS.get((before[-1].lower() if before else "", low), key)
        if _MEASURE_RE.search(low):
            at = text.find(written, cursor)
            cursor = at + len(written)
            split = _split_of(text, at)
            if split:
                key = f"{split}_{key}"
        values[canonical_key(key)] = number
    if not any(_MEASURE_RE.search(k.lower()) for k in values) and (step is None or not values):
        return None
    return _record("kv", text, values, step=step)


def parse_pipes(text: str) -> LogRecord | None:
    """Megatron's ``iteration N/ M | key words: value | ...`` line; keys become ``key_words`` (``grad_norm``)."""
    fields = text.split("|")
    head = _PIPE_HEAD_RE.match(fields[0])
    if head is None:
        return _parse_pipes_eval(fields)
    values: dict[str, float] = {}
    for field in fields[1:]:
        match = _PIPE_FIELD_RE.match(field)
        if match:
            key = "_".join(match.group(1).lower().split())
            number = finite(match.group(2))
            if number is not None:
                values[_PIPE_KEYS.get(key, key)] = number
    return _record("megatron", text, values, step=int(head.group(1)), total=int(head.group(2))) if values else None


def _parse_pipes_eval(fields: list[str]) -> LogRecord | None:
    """Megatron's evaluation line (:data:`_PIPE_EVAL_RE`): ``lm loss value`` is the split's loss (``val_loss``,
    ``test_loss`` "on test set"), ``lm loss PPL`` its perplexity (``val_ppl``)."""
    head = _PIPE_EVAL_RE.match(fields[0])
    if head is None:
        return None
    split = "test" if "test" in fields[0] else "val"
    values: dict[str, float] = {}
    for field in fields[1:]:
        match = _PIPE_FIELD_RE.match(field)
        number = finite(match.group(2)) if match else None
        if match is None or number is None:
            continue
        key = "_".join(match.group(1).lower().split()).removesuffix("_value")
        key = "ppl" if key.endswith("_ppl") else _PIPE_KEYS.get(key, key)
        values[f"{split}_{key}"] = number
    step = int(head.group(1)) if head.group(1) else None
    return _record("megatron", "|".join(fields), values, step=step) if values else None
