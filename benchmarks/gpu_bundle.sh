#!/usr/bin/env bash
# Build .gpu/ — what a GPU machine without internet and without the project's Python dependencies needs to
# run benchmarks/gpu_suite.py: the wheels it lacks (cp312, x86-64), the GPT-2 tokenizer built locally in an
# HF-cache folder, and the project source (git archive of HEAD). Nothing binary is committed: the wheels come
# from the package index (or GPU_BUNDLE_WHEELS, a folder that already holds them), the tokenizer from the
# BPE ranks in openai-whisper's source package (or GPU_BUNDLE_RANKS, a gpt2.tiktoken file).
#
#   bash benchmarks/gpu_bundle.sh            # from the repository root; writes .gpu/ (about 7 MiB)
#   # on the GPU machine, from the repository root, with OUT set:
#   timeout -k 15 420 python3 .gpu/project/benchmarks/gpu_suite.py --bundle .gpu --out "$OUT" --budget 330
#
# Env: GPU_BUNDLE_DIR (default .gpu), GPU_BUNDLE_WHEELS, GPU_BUNDLE_RANKS, PYTHON (default python3).
set -euo pipefail
ROOT="$(git rev-parse --show-toplevel)"
cd "$ROOT"
PY="${PYTHON:-python3}"
DEST="${GPU_BUNDLE_DIR:-.gpu}"
case "$DEST" in /*|*..*) echo "gpu_bundle: GPU_BUNDLE_DIR must be a relative path inside the checkout" >&2; exit 2;; esac

# The bundle folder is never committed: keep it out of git (the common exclude file serves every worktree).
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF "/$DEST/" "$EXCLUDE" 2>/dev/null || echo "/$DEST/" >> "$EXCLUDE"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
rm -rf "$DEST"
mkdir -p "$DEST/wheels" "$DEST/project"

# 1. wheels: what the GPU machine's Python 3.12 lacks (pydantic & co for the CLI, psutil, the sandbox's).
WHEELS=(pydantic pydantic_core annotated_types typing_inspection typing_extensions psutil landlockpy pyseccomp)
if [ -n "${GPU_BUNDLE_WHEELS:-}" ]; then
  for w in "${WHEELS[@]}"; do cp "$GPU_BUNDLE_WHEELS"/"$w"-*.whl "$DEST/wheels/"; done
else
  # pydantic and pydantic_core must match: take the versions installed here (the ones the tests ran with).
  pins=()
  for w in "${WHEELS[@]}"; do
    v="$("$PY" -c "import importlib.metadata as m; print(m.version('${w//_/-}'))" 2>/dev/null || true)"
    pins+=("${w//_/-}${v:+==$v}")
  done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$DEST/wheels" "${pins[@]}"
fi
n_wheels="$(ls "$DEST/wheels" | wc -l)"
[ "$n_wheels" -eq "${#WHEELS[@]}" ] || { echo "gpu_bundle: expected ${#WHEELS[@]} wheels, got $n_wheels" >&2; exit 1; }

# 2. the GPT-2 tokenizer, built here from its BPE ranks (the GPU machine cannot reach the hub).
RANKS="${GPU_BUNDLE_RANKS:-}"
if [ -z "$RANKS" ]; then
  "$PY" -m pip download -q --no-deps --no-binary=:all: openai-whisper -d "$TMP"
  tar -xzf "$TMP"/openai_whisper-*.tar.gz -C "$TMP" --wildcards '*/whisper/assets/gpt2.tiktoken'
  RANKS="$(ls "$TMP"/openai_whisper-*/whisper/assets/gpt2.tiktoken)"
fi
"$PY" benchmarks/gpu_tokenizer.py "$RANKS" "$DEST/hf"

# 3. the project at HEAD (what is committed is what is measured; the commit is recorded beside it).
git archive HEAD | tar -x -C "$DEST/project"
git rev-parse HEAD > "$DEST/COMMIT"
size="$(du -sm "$DEST" | cut -f1)"
[ "$size" -le 50 ] || { echo "gpu_bundle: $DEST is $size MiB (limit 50)" >&2; exit 1; }
echo "gpu_bundle: $DEST ready ($size MiB, commit $(cut -c1-12 "$DEST/COMMIT"), $n_wheels wheels)"
