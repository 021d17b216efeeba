"""A draft one layer deeper that computes exactly what the given draft computes, to train on from there.

    python scripts/grow_draft.py --draft minibass/zoo/demo/draft --out build/draft-grown

The new last layer starts as a copy of the draft's last layer with its two output projections
(attention's ``o_proj``, the MLP's ``down_proj``, biases included) set to zero: it adds nothing to the residual
stream, so the deeper draft's logits are the draft's own, until training moves them. Then
``python -m minibass.zoo.train --draft-from OUT ...`` goes on distilling it; what it gains over more
training of the draft itself is the layer's doing. The folder is written in float32, with the
draft's tokenizer files beside it.
"""

from __future__ import annotations

import argparse
import copy
import shutil
from pathlib import Path

import torch


def grow(model):
    """A copy of a transformers Llama-family ``model`` with one more layer that leaves its output unchanged."""
    grown = copy.deepcopy(model)
    layer = copy.deepcopy(grown.model.layers[-1])
    layer.self_attn.layer_idx = len(grown.model.layers)
    with torch.no_grad():
        for projection in (layer.self_attn.o_proj, layer.mlp.down_proj):
            projection.weight.zero_()
            if projection.bias is not None:
                projection.bias.zero_()
    grown.model.layers.append(layer)
    grown.config.num_hidden_layers += 1
    if getattr(grown.config, "layer_types", None):
        grown.config.layer_types = list(grown.config.layer_types) + [grown.config.layer_types[-1]]
    return grown


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draft", type=Path, required=True, help="a Hugging Face folder of a Llama-family draft")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the deeper draft to")
    args = parser.parse_args(argv)
    if not (args.draft / "config.json").is_file():
        raise FileNotFoundError(f"{args.draft} is not a checkpoint folder (no config.json)")
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out} is a file; it names the folder to write the deeper draft to")
    from transformers import AutoModelForCausalLM

    from minibass.loading import hf_dtype

    model = AutoModelForCausalLM.from_pretrained(args.draft, **hf_dtype(torch.float32))
    grow(model).save_pretrained(args.out)
    for file in args.draft.iterdir():  # the tokenizer; not the model card, which describes the draft
        if file.name.startswith("tokenizer") or file.name == "special_tokens_map.json":
            shutil.copy(file, args.out / file.name)
    print(f"{args.out}: {model.config.num_hidden_layers} + 1 layers, the new one adding nothing yet")


if __name__ == "__main__":
    from minibass.bench.common import run_script

    run_script(main)
