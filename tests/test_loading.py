"""Loading real checkpoint folders: sharded files, and clear refusals for what minibass does not compute."""

from __future__ import annotations

import json
import warnings

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
    heads = raw.pop("num_attention_heads")
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="lacks the field 'num_attention_heads'"):
        minibass.load_model(folder)
    (folder / "config.json").write_text(json.dumps({**raw, "num_attention_heads": heads, "vocab_size": None}))
    with pytest.raises(ValueError, match=r"lacks the field 'vocab_size' \(or it is null\)"):
        minibass.load_model(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        minibass.load_model(folder)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="config.json must hold a JSON object of config fields, got a JSON list"):
        minibass.load_model(folder)


@pytest.mark.parametrize("path", [None, 3, b"folder"])
def test_a_path_that_is_not_a_path_is_refused(path):
    with pytest.raises(ValueError, match="load_model takes the path of a checkpoint folder"):
        minibass.load_model(path)


def test_dtype_by_name_and_bad_dtypes(save_hf):
    folder = save_hf(hf_tiny("llama"))
    assert next(minibass.load_model(folder, dtype="bfloat16").parameters()).dtype == torch.bfloat16
    assert next(minibass.load_model(folder, dtype="torch.float64").parameters()).dtype == torch.float64
    for bad in ("bf16", torch.int64, float, torch.float8_e4m3fn, "float8_e5m2"):  # float8: no decoder op runs in it
        with pytest.raises(ValueError, match="dtype must be one of torch.float16, torch.bfloat16"):
            minibass.load_model(folder, dtype=bad)


def test_bad_devices_are_refused_before_the_weights_are_read(save_hf):
    folder = save_hf(hf_tiny("llama"))
    for bad in ("gpu", "cuda:x", 3.5):
        with pytest.raises(ValueError, match="device must be a torch device or its name"):
            minibass.load_model(folder, device=bad)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'cuda' asked for, but CUDA is not available"):
            minibass.load_model(folder, device="cuda")
    with pytest.raises(ValueError, match="'meta' holds shapes, not weights"):
        minibass.load_model(folder, device="meta")
    if not torch.backends.mps.is_available():  # a device type this PyTorch knows but cannot use here
        with pytest.raises(ValueError, match="'mps' asked for, but this PyTorch .* cannot use it"):
            minibass.load_model(folder, device="mps")


def test_model_safetensors_wins_over_an_index_beside_it_as_in_transformers(save_hf):
    hf = hf_tiny("llama")
    folder = save_hf(hf, max_shard_size="20KB")  # shards and their index
    other = hf_tiny("llama", seed=1)
    other.save_pretrained(folder / "single")
    (folder / "single" / "model.safetensors").rename(folder / "model.safetensors")
    ids = torch.tensor([5, 9, 2, 7])
    model = minibass.load_model(folder)
    out = model(ids, torch.tensor([4]), model.init_cache(1, 8), attention="naive")
    assert (out - other(ids[None]).logits[0]).abs().max() <= 1e-4


def test_a_stray_weights_file_beside_model_safetensors_is_left_alone(save_hf):
    from safetensors.torch import save_file

    folder = save_hf(hf_tiny("llama"))
    save_file({"tok_embeddings.weight": torch.zeros(2, 2)}, folder / "consolidated.safetensors")  # Mistral's naming
    assert minibass.load_model(folder).vocab_size == 97


def test_a_damaged_weights_file_is_named(save_hf):
    folder = save_hf(hf_tiny("llama"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: the header promises more than is there
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        minibass.load_model(folder)


def test_a_tied_config_with_a_different_stored_head_is_refused(save_hf):
    """transformers 5 uses the stored head there, older versions the embeddings: minibass asks which."""
    folder = save_hf(hf_tiny("llama"))  # untied: lm_head.weight is stored and differs from the embeddings
    edit_config(folder, tie_word_embeddings=True)
    with pytest.raises(ValueError, match="ties the output head.*lm_head.weight differs"):
        minibass.load_model(folder)
    tied = save_hf(hf_tiny("llama", tie_word_embeddings=True), "tied")  # a truly tied checkpoint still loads
    hf, ids = hf_tiny("llama", tie_word_embeddings=True), torch.tensor([5, 9, 2, 7])
    model = minibass.load_model(tied)
    out = model(ids, torch.tensor([4]), model.init_cache(1, 8), attention="naive")
    assert (out - hf(ids[None]).logits[0]).abs().max() <= 1e-4


def logits_gap(folder, length: int = 40) -> float:
    """Largest |logit difference| of minibass and transformers on one prompt, both loaded from ``folder``."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    model = minibass.load_model(folder)
    ids = torch.randint(0, model.vocab_size, (length,), generator=torch.Generator().manual_seed(0))
    ours = model(ids, torch.tensor([length]), model.init_cache(1, length), attention="naive")
    with torch.no_grad():
        return (ours - hf(ids[None]).logits[0]).abs().max().item()


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@pytest.mark.parametrize("changes", [
    pytest.param(dict(rope_parameters={"rope_type": "linear", "factor": 4.0}, rope_theta=50000.0),
                 id="rope_parameters-without-its-theta"),
    pytest.param(dict(rope_parameters=None, rope_theta=50000.0, rope_scaling={"type": "linear", "factor": 2.0}),
                 id="transformers-4-spelling"),
    pytest.param(dict(rope_parameters=dict(LLAMA3, rope_theta=500000.0)),
                 id="llama3-without-original-length"),  # transformers uses max_position_embeddings
    pytest.param(dict(rope_parameters=dict(LLAMA3, rope_theta=500000.0), original_max_position_embeddings=256),
                 id="llama3-original-length-at-top-level"),  # as Phi-3 writes it
])
def test_rope_spellings_are_read_as_transformers_reads_them(save_hf, changes):
    """Each spelling moves the logits away from the default rotation, and minibass follows it."""
    folder = save_hf(hf_tiny("llama", head_dim=64))
    plain = minibass.load_model(folder)
    edit_config(folder, **changes)
    assert logits_gap(folder) <= 1e-4
    ids = torch.arange(40) % plain.vocab_size
    edited = minibass.load_model(folder)
    assert (edited(ids, torch.tensor([40]), edited.init_cache(1, 40), attention="naive")
            - plain(ids, torch.tensor([40]), plain.init_cache(1, 40), attention="naive")).abs().max() > 1e-2


@pytest.mark.parametrize("changes,message", [
    # A rope_scaling added to a transformers-5 config (as Qwen2.5's card asks for yarn): both versions of
    # transformers read rope_scaling and ignore rope_parameters, its theta included.
    (dict(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}),
     "rope scaling 'yarn' is not implemented"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 4.0}), "both rope_scaling .* and rope_parameters"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6}, rope_scaling={"rope_type": "default"}),
     "both rope_scaling .* and rope_parameters"),
    (dict(rope_parameters=None, rope_theta=5e5, rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 7e5}),
     "rope_scaling has rope_theta 700000.0, the top level 500000.0"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4}, rope_theta=5e5),
     "rope_theta twice, 10000.0 in rope_parameters and 500000.0 at the top level"),
    (dict(rope_parameters=None, rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 7e5}),
     "the top level none \\(so 10000.0\\)"),
    (dict(rope_parameters=dict(LLAMA3, rope_theta=5e5, original_max_position_embeddings=64),
          original_max_position_embeddings=256), "original_max_position_embeddings twice"),
    (dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5}),
     "llama3 rope scaling lacks low_freq_factor, high_freq_factor"),
    (dict(rope_parameters={"rope_type": "linear", "rope_theta": 5e5}), "linear rope scaling lacks factor"),
    (dict(rope_parameters="linear"), "rope_parameters must be an object"),
    # A theta of 0 is refused, not read as "none given" (which would compute with 10000 or the other field's).
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 0}), "rope_theta must be a positive number, got 0"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 0}, rope_theta=5e5),
     "rope_theta twice, 0 in rope_parameters and 500000.0 at the top level"),
    (dict(rope_parameters=None, rope_theta=-1.0), "rope_theta must be a positive number, got -1.0"),
    (dict(rope_parameters=None, rope_theta=0, rope_scaling={"rope_type": "linear", "factor": 2.0}),
     "rope_theta must be a positive number, got 0"),
    (dict(rope_parameters=None, rope_theta=0, rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 0}),
     "rope_theta must be a positive number"),
    (dict(rope_parameters=None, rope_theta=0, rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
     "rope_scaling has rope_theta 10000.0, the top level 0"),
])
def test_contradictory_or_incomplete_rope_configs_are_refused(save_hf, changes, message):
    folder = save_hf(hf_tiny("llama"))
    edit_config(folder, **changes)
    with pytest.raises(ValueError, match=message):
        minibass.load_model(folder)


@pytest.mark.parametrize("kind,changes,max_seq_len", [
    ("mistral", dict(sliding_window=None), 4096),  # the key left out: transformers' default window of 4096
    ("llama", dict(sliding_window=16), 8192),  # transformers' Llama has no sliding window and ignores the key
    ("qwen2", dict(use_sliding_window=True, sliding_window=16, max_window_layers=2), 8192),  # no layer slides
    ("qwen2", dict(use_sliding_window=True, sliding_window=16, max_window_layers=1), 16),
    ("qwen2", dict(use_sliding_window=True, sliding_window=None, max_window_layers=1), 4096),
])
def test_the_sliding_window_is_the_one_transformers_uses(save_hf, kind, changes, max_seq_len):
    folder = save_hf(hf_tiny(kind, max_position_embeddings=8192))
    edit_config(folder, layer_types=None, **changes)  # edit_config removes a key set to None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = minibass.load_model(folder)
    assert model.max_seq_len == max_seq_len
    assert any("sliding-window" in str(w.message) for w in seen) == (max_seq_len < 8192)
    raw = json.loads((folder / "config.json").read_text())
    raw["sliding_window"] = None  # written as null: no window at all
    (folder / "config.json").write_text(json.dumps(raw))
    assert minibass.load_model(folder).max_seq_len == 8192
    if max_seq_len < 8192:  # a config that slides, with a window of 0
        (folder / "config.json").write_text(json.dumps({**raw, "sliding_window": 0}))
        with pytest.raises(ValueError, match="sliding_window must be a positive int or null, got 0"):
            minibass.load_model(folder)


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


def imported_in_a_fresh_process(statement: str, module: str) -> tuple[bool, bool]:
    """Whether ``module`` was imported after ``import minibass``, and after ``statement`` too, in a new
    interpreter (what a command line pays for at start-up)."""
    import subprocess
    import sys

    script = (f"import sys, minibass\nbefore = {module!r} in sys.modules\n{statement}\n"
              f"print(before, {module!r} in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.split()
    return before == "True", after == "True"


def test_a_generic_fast_tokenizer_loads_without_transformers_auto_classes(tmp_path):
    """The demo pair's tokenizer (``PreTrainedTokenizerFast``) loads with that class, the same object as
    ``AutoTokenizer`` gives, without importing the auto classes (2 s); any other folder goes through
    ``AutoTokenizer``."""
    from transformers import AutoTokenizer

    from minibass import zoo

    folder = zoo.demo_paths()[0]
    ours, auto = minibass.load_tokenizer(folder), AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert type(ours) is type(auto) and ours.eos_token_id == auto.eos_token_id
    for text in zoo.demo_prompts(8):
        assert ours.encode(text) == auto.encode(text)
        assert ours.decode(auto.encode(text)) == auto.decode(auto.encode(text))
    assert imported_in_a_fresh_process(f"minibass.load_tokenizer({str(folder)!r})", "transformers.models.auto") \
        == (False, False)
    # Another class named, another model type (Qwen2: AutoTokenizer overrides the class named), or no
    # config.json: AutoTokenizer reads the folder, and load_tokenizer gives what it gives.
    text = "def f(x):\n    return x"
    for tokenizer_class, model_type in [("GPT2TokenizerFast", "llama"), ("PreTrainedTokenizerFast", "qwen2"),
                                        ("PreTrainedTokenizerFast", None)]:
        case = tmp_path / f"{tokenizer_class}-{model_type}"
        case.mkdir()
        (case / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
        for name, key, value in [("tokenizer_config.json", "tokenizer_class", tokenizer_class),
                                 ("config.json", "model_type", model_type)]:
            if value is not None:
                edited = json.loads((folder / name).read_text())
                edited[key] = value
                (case / name).write_text(json.dumps(edited))
        ours, auto = minibass.load_tokenizer(case), AutoTokenizer.from_pretrained(case, local_files_only=True)
        assert type(ours) is type(auto), (tokenizer_class, model_type)
        assert ours.encode(text) == auto.encode(text) and ours.pad_token == auto.pad_token


def test_loading_builds_the_decoder_without_random_weights_or_the_compiler(save_hf):
    """load_model builds the decoder on the meta device and assigns the checkpoint's weights: no random
    init, and no meta-device op that imports torch._dynamo (the embedding's normal_ and the rotary
    frequencies' arange do, 3 s on a 2-core CPU). A decoder built for its own use is initialised as
    before: the embedding first, with nn.Embedding's own init."""
    from minibass.model import Decoder

    folder = save_hf(hf_tiny("llama"))
    before, after = imported_in_a_fresh_process(f"minibass.load_model({str(folder)!r})", "torch._dynamo")
    if before:
        pytest.skip("this torch imports torch._dynamo with the package itself")
    assert not after, "loading a checkpoint imported torch._dynamo"
    config = minibass.load_model(folder).config
    torch.manual_seed(0)
    built = Decoder(config)
    torch.manual_seed(0)
    plain = torch.nn.Embedding(config.vocab_size, config.hidden_size)
    assert torch.equal(built.model.embed_tokens.weight, plain.weight)
    assert built.model.embed_tokens.weight.requires_grad
    with torch.device("meta"):
        assert Decoder(config).inv_freq.is_meta  # the whole decoder on the meta device, buffers too
