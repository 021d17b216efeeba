"""The demo pair shipped inside the package: a small Python-code target and its distilled draft.

Both are ordinary Hugging Face folders (config.json, bf16 model.safetensors, tokenizer.json,
a model card with provenance) under ``minibass/zoo/demo/``, made by ``python -m minibass.zoo.train``
from the Python standard library's own sources, and the held-out prompts the demo uses
(``demo/prompts.json``), shipped as data. They load with ``minibass.load_model`` and with
``transformers.AutoModelForCausalLM`` alike. Nothing here imports the training code.
"""

from __future__ import annotations

import json
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


def demo_prompts(n: int = 8) -> list[str]:
    """Up to ``n`` held-out prompts shipped with the pair (``demo/prompts.json``): the first two lines
    of a function definition from each standard-library file the pair never trained on."""
    data = json.loads((DEMO / "prompts.json").read_text())
    return [p["text"] for p in data["prompts"][:n]]


def demo_batches(tokenizer, batch: int, n: int = 8) -> list[list[list[int]]]:
    """The demo's prompts as token ids in batches of ``batch``: at least ``n`` prompts, rounded up to whole
    batches, the held-out prompts repeated where there are too few, so that every batch size decodes the
    same text."""
    count = -(-max(n, batch) // batch) * batch  # whole batches
    texts = demo_prompts(count)
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in (texts * count)[:count]]
    return [prompts[i:i + batch] for i in range(0, count, batch)]
