"""The demo pair shipped inside the package: a small Python-code target and its distilled draft.

Both are ordinary Hugging Face folders (config.json, bf16 model.safetensors, tokenizer.json,
a model card with provenance) under ``minibass/zoo/demo/``, made by ``python -m minibass.zoo.train``
from the Python standard library's own sources. They load with ``minibass.load_model`` and with
``transformers.AutoModelForCausalLM`` alike.
"""

from __future__ import annotations

from pathlib import Path

DEMO = Path(__file__).parent / "demo"


def demo_paths() -> tuple[Path, Path]:
    """(target folder, draft folder) of the shipped demo pair."""
    target, draft = DEMO / "target", DEMO / "draft"
    for folder in (target, draft):
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"the demo pair is missing at {folder}; reinstall minibass or run "
                                    f"`python -m minibass.zoo.train --out {DEMO}`")
    return target, draft


def load_demo_pair(dtype=None, device=None):
    """(target, draft, tokenizer) of the shipped pair, as minibass decoders (float32 on the CPU by default)."""
    from minibass.loading import load_model, load_tokenizer

    target_dir, draft_dir = demo_paths()
    return (load_model(target_dir, dtype=dtype, device=device), load_model(draft_dir, dtype=dtype, device=device),
            load_tokenizer(target_dir))


def held_out_files() -> list[Path]:
    """Standard-library sources the demo pair never trained on (the training script's path-hash split)."""
    from .train import corpus_files

    return corpus_files()[1]


def demo_prompts(n: int = 8, lines: int = 2) -> list[str]:
    """The first ``lines`` lines of function definitions from held-out standard-library files."""
    prompts = []
    for path in held_out_files():
        text_lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for i, line in enumerate(text_lines):
            if line.lstrip().startswith("def ") and line.rstrip().endswith(":"):
                prompts.append("\n".join(text_lines[i:i + lines]) + "\n")
                break  # one per file: varied prompts
        if len(prompts) == n:
            break
    return prompts
