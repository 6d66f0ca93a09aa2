"""Build the tiny random Llama model the local stack serves (no model hub needed).

Run with the *stack* venv's python (it needs torch, transformers and tokenizers):

    $STACK_PY deploy/local/build_model.py [--out DIR] [--force]

Default output: ``${KVPLAN_STACK_HOME:-$HOME/.cache/kvplan/stack}/models/tiny-llama``.
Nothing is done when the directory already holds a complete model (a
``.kvplan-ok`` marker is written last). The build is deterministic: a byte-level
BPE tokenizer (vocab 4096) trained on this Python's standard-library ``.py``
files in sorted order, and a ``LlamaForCausalLM`` (hidden 256, intermediate 512,
4 layers, 4 heads, 2 KV heads, 8192 positions, bf16) initialised with a fixed
seed. Its output text is noise; its KV cache, prefix caching and metrics are real.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

SEED = 1234
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]  # ids 0, 1, 2
MARKER = ".kvplan-ok"

LLAMA = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
    tie_word_embeddings=False,
)


def default_out_dir() -> Path:
    home = os.environ.get("KVPLAN_STACK_HOME") or str(Path.home() / ".cache" / "kvplan" / "stack")
    return Path(home) / "models" / "tiny-llama"


def training_files() -> list[str]:
    """The stdlib's own .py files (tests excluded to keep training to a few seconds)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo"}
    files = []
    for p in sorted(stdlib.rglob("*.py")):
        rel = p.relative_to(stdlib)
        if any(part in skip for part in rel.parts[:-1]):
            continue
        files.append(str(p))
    return files


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    files = training_files()
    tok.train(files, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=LLAMA["max_position_embeddings"],
    )
    fast.save_pretrained(str(out))
    print(f"[build_model] tokenizer: vocab {tok.get_vocab_size()} trained on {len(files)} stdlib files")


def build_weights(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(**LLAMA, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(bos_token_id=0, eos_token_id=1, pad_token_id=2).save_pretrained(str(out))
    n = sum(p.numel() for p in model.parameters())
    print(f"[build_model] model: LlamaForCausalLM {n / 1e6:.1f} M parameters, bf16, seed {SEED}")


def build(out: Path, force: bool = False) -> Path:
    if (out / MARKER).exists() and not force:
        print(f"[build_model] model already built: {out}")
        return out
    t0 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        build_tokenizer(tmp)
        build_weights(tmp)
        (tmp / MARKER).write_text(json.dumps({"seed": SEED, "llama": LLAMA}) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"[build_model] built {out} in {time.monotonic() - t0:.1f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out_dir())
    ap.add_argument("--force", action="store_true", help="rebuild even if present")
    args = ap.parse_args(argv)
    path = build(args.out, force=args.force)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
