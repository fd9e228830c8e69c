"""Build the GPT-2 tokenizer offline, as an HF-cache folder, for a GPU machine that cannot reach the hub.

    python benchmarks/gpu_tokenizer.py RANKS_FILE OUT_DIR     # then HF_HOME=OUT_DIR finds "gpt2"

RANKS_FILE is a tiktoken BPE-rank file (``base64(token) rank`` per line), e.g. ``gpt2.tiktoken`` shipped in
openai-whisper's source package (``benchmarks/gpu_bundle.sh`` fetches it). GPT-2's merges are not in that
file: each multi-byte token's merge is recovered by running byte-pair merging with only the lower ranks
(tiktoken's order), which must end in exactly two parts. The byte → unicode map is GPT-2's. "Hello world"
→ [15496, 995] with the real file. Prints ``ok VOCAB MERGES``.
"""

from __future__ import annotations

import base64
import json
import os
import sys


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes, extra = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, codes, strict=True)}


def read_ranks(path: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def merge_of(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two parts byte-pair merging with ranks below ``rank`` leaves of ``token``."""
    parts = [bytes([b]) for b in token]
    while True:
        best: tuple[int, int] | None = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts = [*parts[:i], parts[i] + parts[i + 1], *parts[i + 2 :]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {rank}) does not split into two lower-ranked parts: {parts}")
    return parts[0], parts[1]


def build(ranks_path: str, out_dir: str, eos: str = "<|endoftext|>") -> tuple[int, int]:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    ranks = read_ranks(ranks_path)
    b2u = byte_to_unicode()

    def enc(raw: bytes) -> str:
        return "".join(b2u[x] for x in raw)

    vocab = {enc(k): v for k, v in ranks.items()}
    merges = [tuple(enc(p) for p in merge_of(tok, r, ranks))
              for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1]
    eos_id = max(ranks.values()) + 1
    vocab[eos] = eos_id
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                              end_of_word_suffix="", fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tk.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tk.add_special_tokens([AddedToken(eos, special=True, normalized=False)])
    commit = "0" * 39 + "1"
    repo = os.path.join(out_dir, "hub", "models--gpt2")
    snap = os.path.join(repo, "snapshots", commit)
    os.makedirs(snap, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as fh:
        fh.write(commit)
    tk.save(os.path.join(snap, "tokenizer.json"))
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": eos, "eos_token": eos,
              "unk_token": eos, "add_prefix_space": False}
    model = {"model_type": "gpt2", "vocab_size": eos_id + 1, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
             "n_head": 12, "bos_token_id": eos_id, "eos_token_id": eos_id, "architectures": ["GPT2LMHeadModel"]}
    with open(os.path.join(snap, "tokenizer_config.json"), "w") as fh:
        json.dump(config, fh)
    with open(os.path.join(snap, "config.json"), "w") as fh:
        json.dump(model, fh)
    return len(vocab), len(merges)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: gpu_tokenizer.py RANKS_FILE OUT_DIR", file=sys.stderr)
        sys.exit(2)
    n_vocab, n_merges = build(sys.argv[1], sys.argv[2])
    print("ok", n_vocab, n_merges)
