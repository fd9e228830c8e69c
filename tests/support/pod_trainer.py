"""The training on the fake pod (run through ``pod_python``): the job-folder contract of the real runtime
without torch, at a step rate a test chooses.

Per step it appends ``{"step", "loss"}`` to ``metrics.jsonl`` and prints ``step N/TOTAL loss X``; every
``RECIPE_POD_SAVE_EVERY`` steps it writes ``checkpoints/step_<8 digits>/state.pt`` the way the runtime does (built
in ``.tmp-step_…``, then renamed; the newest three kept). On SIGTERM it checkpoints the current step, writes
the ``PREEMPTED`` marker and exits 75, like :mod:`gputrain.train.runtime.signals`. It starts after the newest
``checkpoints/step_*`` it finds (a resumed run). At the end it writes
``result.json`` and ``model.onnx`` and exits ``RECIPE_POD_EXIT`` (0). Settings come from the recipe's ``env``
(``--set env.RECIPE_POD_STEPS=96``), which the launcher exports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

STEPS = int(os.environ.get("RECIPE_POD_STEPS", "12"))
STEP_S = float(os.environ.get("RECIPE_POD_STEP_S", "0.05"))
SAVE_EVERY = int(os.environ.get("RECIPE_POD_SAVE_EVERY", "4"))
EXIT = int(os.environ.get("RECIPE_POD_EXIT", "0"))


def save(job: Path, step: int) -> None:
    root = job / "checkpoints"
    tmp = root / f".tmp-step_{step:08d}"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "state.pt").write_bytes(json.dumps({"step": step}).encode() + b"\0" * 4096)
    final = root / f"step_{step:08d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(p for p in root.iterdir() if p.name.startswith("step_"))[:-3]:
        shutil.rmtree(old)


def main() -> int:
    job = Path(sys.argv[sys.argv.index("--job-dir") + 1])
    stop = {"signal": None}
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.update(signal=signum))
    saved = sorted(p.name for p in (job / "checkpoints").glob("step_*")) if (job / "checkpoints").is_dir() else []
    start = int(saved[-1][5:]) + 1 if saved else 1  # resumes from the newest checkpoint, as the runtime does
    if saved:
        print(f"resumed from {saved[-1]}", flush=True)
    with open(job / "metrics.jsonl", "a", encoding="utf-8") as metrics:
        for step in range(start, STEPS + 1):
            time.sleep(STEP_S)
            loss = 1.0 / step
            metrics.write(json.dumps({"step": step, "loss": loss}) + "\n")
            metrics.flush()
            print(f"step {step}/{STEPS} loss {loss:.4f}", flush=True)
            if step % SAVE_EVERY == 0:
                save(job, step)
            if stop["signal"] is not None:
                save(job, step)
                (job / "PREEMPTED").write_text(json.dumps({"step": step, "signal": "SIGTERM"}) + "\n")
                print(f"stopped at step {step} (SIGTERM): checkpointed", flush=True)
                return 75
    (job / "result.json").write_text(json.dumps({"steps": STEPS, "final_loss": 1.0 / STEPS}) + "\n")
    (job / "model.onnx").write_bytes(b"onnx-stand-in\n")
    return EXIT


if __name__ == "__main__":
    sys.exit(main())
