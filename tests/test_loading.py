"""Loading real checkpoint folders: sharded files, and clear refusals for what minibass does not compute."""

from __future__ import annotations

import json

import pytest
import torch

import minibass
from conftest import hf_tiny


def edit_config(folder, **changes):
    path = folder / "config.json"
    raw = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    path.write_text(json.dumps(raw))


def test_sharded_checkpoint_loads(save_hf):
    hf = hf_tiny("llama")
    folder = save_hf(hf, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").exists()
    model = minibass.load_model(folder)
    ids = torch.tensor([5, 9, 2, 7])
    out = model(ids, torch.tensor([4]), model.init_cache(1, 8), attention="naive")
    assert (out - hf(ids[None]).logits[0]).abs().max() <= 1e-4


def test_missing_folder_and_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint folder not found"):
        minibass.load_model(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        minibass.load_model(tmp_path)


def test_pickled_weights_are_refused_with_a_conversion_hint(save_hf):
    folder = save_hf(hf_tiny("llama"))
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(FileNotFoundError, match="never unpickles.*safe_serialization=True"):
        minibass.load_model(folder)


def test_no_weights_at_all(save_hf):
    folder = save_hf(hf_tiny("llama"))
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        minibass.load_model(folder)


def test_missing_shard(save_hf):
    folder = save_hf(hf_tiny("llama"), max_shard_size="20KB")
    next(folder.glob("model-0000*.safetensors")).unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        minibass.load_model(folder)


@pytest.mark.parametrize("changes,message", [
    (dict(model_type="gpt2"), "unsupported architecture model_type='gpt2'"),
    (dict(hidden_act="gelu"), "hidden_act='gelu' is not supported"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}), "rope scaling 'yarn'"),
    (dict(rope_parameters=None, rope_scaling={"type": "dynamic", "factor": 2.0}), "rope scaling 'dynamic'"),
    (dict(quantization_config={"quant_method": "gptq"}), "quantized"),
    (dict(num_attention_heads=5), "multiple of"),
])
def test_unsupported_configs_are_refused(save_hf, changes, message):
    folder = save_hf(hf_tiny("llama"))
    edit_config(folder, **changes)
    with pytest.raises(ValueError, match=message.replace("(", "\\(")):
        minibass.load_model(folder)


def test_weights_that_do_not_match_the_config(save_hf):
    folder = save_hf(hf_tiny("llama"))
    edit_config(folder, num_hidden_layers=3)
    with pytest.raises(ValueError, match="missing.*layers.2"):
        minibass.load_model(folder)


def test_malformed_configs_and_shapes_name_the_problem(save_hf):
    folder = save_hf(hf_tiny("llama"))
    raw = json.loads((folder / "config.json").read_text())
    edit_config(folder, vocab_size=raw["vocab_size"] + 3)
    with pytest.raises(ValueError, match="embed_tokens.weight has shape .* but config.json implies"):
        minibass.load_model(folder)
    del raw["num_attention_heads"]
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="lacks the field 'num_attention_heads'"):
        minibass.load_model(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        minibass.load_model(folder)


def test_dtype_by_name_and_bad_dtypes(save_hf):
    folder = save_hf(hf_tiny("llama"))
    assert next(minibass.load_model(folder, dtype="bfloat16").parameters()).dtype == torch.bfloat16
    assert next(minibass.load_model(folder, dtype="torch.float64").parameters()).dtype == torch.float64
    for bad in ("bf16", torch.int64, float):
        with pytest.raises(ValueError, match="dtype must be a floating-point torch dtype"):
            minibass.load_model(folder, dtype=bad)


def test_sliding_window_caps_max_seq_len(save_hf):
    folder = save_hf(hf_tiny("mistral", sliding_window=16, max_position_embeddings=64))
    with pytest.warns(UserWarning, match="sliding-window"):
        model = minibass.load_model(folder)
    assert model.max_seq_len == 16
    with pytest.raises(ValueError, match="max_seq_len"):
        minibass.generate(model, [[1] * 10], 7, attention="naive")


def test_load_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)
    loaded = minibass.load_tokenizer(tmp_path)
    assert loaded("a b a", add_special_tokens=False)["input_ids"] == [1, 2, 1]
    with pytest.raises(FileNotFoundError):
        minibass.load_tokenizer(tmp_path / "missing")
    (tmp_path / "weights_only").mkdir()
    with pytest.raises(FileNotFoundError, match="has no tokenizer files"):
        minibass.load_tokenizer(tmp_path / "weights_only")
