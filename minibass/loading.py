"""Loading local Hugging Face checkpoints of the Llama family into ``minibass.model.Decoder``.

Only ``config.json``, ``model.safetensors.index.json`` (if sharded) and ``*.safetensors`` are read;
nothing is ever unpickled. A config that asks for something the decoder does not compute (another
architecture, another activation, an unknown rope scaling, quantisation) is refused instead of being
run approximately, and so is one whose fields contradict each other (a theta given twice with two
values, ``rope_scaling`` and ``rope_parameters`` that disagree).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import torch
from safetensors import safe_open

from .attention.base import DTYPES
from .model import Decoder, ModelConfig, rope_inv_freq

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")

# minibass's fused projections and the checkpoint tensors they concatenate (along the output dim).
FUSED = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}


def checkpoint_names(name: str) -> tuple[str, ...]:
    """The Hugging Face tensor names behind one of the decoder's parameters (itself unless fused)."""
    for fused, parts in FUSED.items():
        if f".{fused}." in name:
            return tuple(name.replace(fused, part) for part in parts)
    return (name,)


# transformers' defaults for fields a config.json may leave out, where the three families differ.
DEFAULT_MAX_POSITIONS = {"llama": 2048, "mistral": 131072, "qwen2": 32768}
DEFAULT_WINDOW = 4096  # Mistral's sliding window, and Qwen2's when use_sliding_window is on
DEFAULT_THETA = 10000.0
REQUIRED_SCALING_FIELDS = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}


def _rope_settings(raw: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) of a config, read as transformers reads it.

    transformers 5 takes the rotation from ``rope_scaling`` when the config has one, else from
    ``rope_parameters``; the theta is that dict's ``rope_theta``, else the top-level one, else 10000.
    transformers 4 reads only ``rope_scaling`` and the top-level ``rope_theta`` (a config written by
    transformers 5, with ``rope_parameters`` alone, is read as transformers 5 reads it). A config whose
    fields contradict each other is refused: a theta given twice with two values, ``rope_scaling``
    beside a ``rope_parameters`` that says something else, a pre-training length given twice.
    """
    top_theta = raw.get("rope_theta")
    legacy, params = raw.get("rope_scaling"), raw.get("rope_parameters")
    if legacy is not None:
        scaling = _spelled_out(legacy, "rope_scaling")
        inner = scaling.pop("rope_theta", None)
        if inner is not None and float(inner) != _theta(top_theta):
            raise ValueError(f"config.json's rope_scaling has rope_theta {inner}, the top level "
                             f"{top_theta if top_theta is not None else f'none (so {DEFAULT_THETA})'}: "
                             "transformers 5 uses the first, transformers 4 the second; keep one")
        theta = _theta(inner, top_theta)
        _supported(scaling)  # an unsupported type is the first thing to say
        if params is not None:
            other = _spelled_out(params, "rope_parameters")
            if _theta(other.pop("rope_theta", None), top_theta) != theta or other != scaling:
                raise ValueError(f"config.json has both rope_scaling ({legacy}) and rope_parameters ({params}), "
                                 "and they say different things (transformers reads a non-empty rope_scaling "
                                 "and ignores rope_parameters, its rope_theta included); remove the one that "
                                 "is not meant")
    elif params is not None:  # transformers >= 5
        scaling = _spelled_out(params, "rope_parameters")
        inner = scaling.pop("rope_theta", None)
        if inner is not None and top_theta is not None and float(inner) != float(top_theta):
            raise ValueError(f"config.json gives rope_theta twice, {inner} in rope_parameters and {top_theta} at "
                             "the top level: transformers 5 uses the first, transformers 4 the second; keep one")
        theta = _theta(inner, top_theta)
    else:
        theta, scaling = _theta(top_theta), {}
    if not (math.isfinite(theta) and theta > 0):  # inv_freq = theta ** (-2i / d): 0 or less is no rotation
        raise ValueError(f"config.json's rope_theta must be a positive number, got {theta}")
    kind = _supported(scaling)
    if kind == "default":
        return theta, None
    missing = [field for field in REQUIRED_SCALING_FIELDS[kind] if field not in scaling]
    if missing:
        raise ValueError(f"config.json's {kind} rope scaling lacks {', '.join(missing)}")
    if kind == "llama3":  # the pre-training length: transformers 5 prefers a top-level value (as Phi-3 writes it)
        top, inner = raw.get("original_max_position_embeddings"), scaling.get("original_max_position_embeddings")
        if top is not None and inner is not None and int(top) != int(inner):
            raise ValueError(f"config.json gives original_max_position_embeddings twice, {top} at the top level "
                             f"and {inner} in the rope scaling (transformers 5 uses the top-level one); keep one")
        fallback = raw.get("max_position_embeddings", DEFAULT_MAX_POSITIONS[raw["model_type"]])
        scaling["original_max_position_embeddings"] = int(top if top is not None else inner if inner is not None
                                                          else fallback)
    return theta, scaling


def _theta(*given) -> float:
    """The first rope theta given (not None; a 0 counts, to be refused), else the default 10000."""
    return float(next((theta for theta in given if theta is not None), DEFAULT_THETA))


def _supported(scaling: dict) -> str:
    """The rope type of a spelled-out rope dict, if the decoder computes it."""
    kind = scaling.get("rope_type", "default")
    if kind != "default" and kind not in REQUIRED_SCALING_FIELDS:
        raise ValueError(f"rope scaling {kind!r} is not implemented by minibass (supported: default, linear, "
                         f"llama3); refusing to load rather than compute different logits")
    return kind


def _spelled_out(scaling, field: str) -> dict:
    """A copy of a rope dict with the older key ``type`` spelled ``rope_type`` (which wins where both are)."""
    if not isinstance(scaling, dict):
        raise ValueError(f"config.json's {field} must be an object, got {scaling!r}")
    scaling = dict(scaling)
    kind = scaling.pop("type", "default")
    scaling.setdefault("rope_type", kind)
    return scaling


def _window(raw: dict) -> int | None:
    """The sliding-attention window this config really uses, or None, as transformers reads it.

    ``raw`` still holds its null fields: a ``sliding_window`` of null means no window, where an absent
    one means transformers' default of 4096. Llama has no sliding window (transformers ignores the key);
    Mistral slides in every layer; Qwen2 only with ``use_sliding_window``, and only in the layers that
    ``layer_types`` marks (by default those from ``max_window_layers`` on).
    """
    model_type = raw["model_type"]
    window = raw.get("sliding_window", DEFAULT_WINDOW)
    if model_type == "llama" or window is None:
        return None
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"config.json's sliding_window must be a positive int or null, got {window!r}")
    if model_type == "qwen2":
        if not raw.get("use_sliding_window"):
            return None
        layer_types = raw.get("layer_types")
        if layer_types is None:
            first_sliding = raw.get("max_window_layers")
            if int(raw.get("num_hidden_layers") or 0) <= int(28 if first_sliding is None else first_sliding):
                return None
        elif "sliding_attention" not in layer_types:
            return None
    return int(window)


def config_from_hf(raw: dict) -> ModelConfig:
    """Translates a Hugging Face ``config.json`` dict into a ``ModelConfig``, refusing what the decoder cannot do."""
    given = raw  # with its null fields, which ``_window`` reads
    raw = {key: value for key, value in raw.items() if value is not None}  # a null field is a missing one
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"unsupported architecture model_type={model_type!r}; minibass loads "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act={act!r} is not supported (the Llama family uses 'silu')")
    if raw.get("quantization_config"):
        raise ValueError("quantized checkpoints (quantization_config) are not supported; load the full-precision weights")
    theta, scaling = _rope_settings(raw)
    max_pos = int(raw.get("max_position_embeddings", DEFAULT_MAX_POSITIONS[model_type]))
    window = _window(given)
    if window is not None and window < max_pos:
        # Sliding-window attention only differs from full attention once a sequence is longer
        # than the window, so the decoder is exact up to `window` tokens and refuses beyond.
        warnings.warn(f"{model_type} config uses sliding-window attention (window {window}); minibass computes "
                      f"full attention, which is identical up to {window} tokens, so max_seq_len is set to {window}")
        max_pos = window
    n_heads = int(raw["num_attention_heads"])
    qkv_bias = bool(raw.get("attention_bias", False)) or model_type == "qwen2"
    return ModelConfig(
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=n_heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or n_heads),
        head_dim=int(raw.get("head_dim") or raw["hidden_size"] // n_heads),
        max_position_embeddings=max_pos,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        qkv_bias=qkv_bias,
        o_bias=bool(raw.get("attention_bias", False)),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        model_type=model_type,
    )


def _weight_files(folder: Path) -> list[Path]:
    """The safetensors files to read, in transformers' order of preference: ``model.safetensors`` alone
    (a stray file beside it, such as Mistral's ``consolidated.safetensors`` in another naming, is left
    alone), else the shards of ``model.safetensors.index.json``, else every ``*.safetensors``."""
    if (folder / "model.safetensors").exists():
        return [folder / "model.safetensors"]
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise FileNotFoundError(f"{index} lists shards that are missing: {missing}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    pickled = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
    if pickled:
        raise FileNotFoundError(
            f"{folder} has only pickled weights ({', '.join(pickled)}); minibass never unpickles files. Convert "
            f"them once, in an environment you trust, with: "
            f"AutoModelForCausalLM.from_pretrained(path).save_pretrained(path, safe_serialization=True)")
    raise FileNotFoundError(f"no *.safetensors weights found in {folder}")


def _dtype(dtype) -> torch.dtype:
    """One of the dtypes the decoder computes in, from a dtype or its name ("bfloat16", "torch.float16");
    default float32."""
    if dtype is None:
        return torch.float32
    named = getattr(torch, dtype.removeprefix("torch."), None) if isinstance(dtype, str) else dtype
    if named not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(str(d) for d in DTYPES)} or its name (e.g. "
                         f"'bfloat16'), got {dtype!r}")
    return named


def _device(device) -> torch.device:
    """A torch device from a device or its name; default CPU. The device must be one this PyTorch can use."""
    try:
        device = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be a torch device or its name (e.g. 'cpu', 'cuda', 'cuda:1'), got {device!r}: "
                         f"{e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} asked for, but CUDA is not available to this PyTorch "
                         f"({torch.__version__})")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {str(device)!r} asked for, but this machine has {torch.cuda.device_count()} "
                         "CUDA device(s)")
    if device.type == "meta":
        raise ValueError("device 'meta' holds shapes, not weights: a model loaded there cannot compute")
    if device.type not in ("cpu", "cuda"):  # mps, xpu, ...: asked before any weight is read
        try:
            torch.empty(0, device=device)
        except Exception as e:  # each backend fails its own way (NotImplementedError, AssertionError, ...)
            raise ValueError(f"device {str(device)!r} asked for, but this PyTorch ({torch.__version__}) cannot "
                             f"use it: {str(e).splitlines()[0]}") from None
    return device


def load_model(path, *, dtype: torch.dtype | str | None = None, device: torch.device | str | None = None) -> Decoder:
    """Loads a local Llama / Mistral / Qwen2 checkpoint folder into minibass's decoder.

    path: folder with ``config.json`` and safetensors weights: ``model.safetensors``, a sharded index, or
    any ``*.safetensors`` files. The decoder's ``max_seq_len`` is the config's ``max_position_embeddings``
    (a smaller sliding window caps it, with a warning).
    dtype: parameter dtype (a torch dtype or its name, e.g. "bfloat16"), default float32. device: default CPU.
    Raises ``FileNotFoundError`` for a missing folder, ``config.json`` or safetensors weights (pickled weights
    are never unpickled), and ``ValueError`` for an architecture or config minibass does not load, or
    weights whose names or shapes do not match the config.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"load_model takes the path of a checkpoint folder (a str or a Path), got "
                         f"{type(path).__name__} {path!r:.40}")
    folder = Path(path)
    if folder.is_file():
        raise FileNotFoundError(f"{folder} is a file; load_model takes the checkpoint's folder (config.json and "
                                "*.safetensors)")
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {folder}")
    config_path = folder / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{folder} has no config.json; expected a Hugging Face checkpoint folder")
    try:
        raw = json.loads(config_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{config_path} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{config_path} must hold a JSON object of config fields, got a JSON {type(raw).__name__}")
    try:
        config = config_from_hf(raw)
    except KeyError as e:
        raise ValueError(f"{config_path} lacks the field {e.args[0]!r} (or it is null), which a "
                         f"{raw.get('model_type')} "
                         "decoder needs") from None
    files = _weight_files(folder)
    dtype = _dtype(dtype)
    device = _device(device)

    with torch.device("meta"):
        model = Decoder(config)
    state = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for name in f.keys():
                    state[name] = f.get_tensor(name)
        except Exception as e:  # safetensors' own error type for a damaged or truncated file
            raise ValueError(f"{file} is not a readable safetensors file: {e}") from None
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}  # old checkpoints store it
    if config.tie_word_embeddings:
        head, embedding = state.pop("lm_head.weight", None), state.get("model.embed_tokens.weight")
        if head is not None and embedding is not None and not torch.equal(head, embedding):
            raise ValueError(f"{config_path} ties the output head to the token embeddings "
                             "(tie_word_embeddings), but the checkpoint's lm_head.weight differs from them; "
                             "transformers 5 then uses the stored head and older versions tie it: set "
                             "tie_word_embeddings to false, or remove lm_head.weight, to say which is meant")
    shapes = model.state_dict()  # (meta tensors: names and shapes only)
    ours = [k for k in shapes if not (config.tie_word_embeddings and k == "lm_head.weight")]
    expected = {part for name in ours for part in checkpoint_names(name)}
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise ValueError(f"checkpoint {folder} does not match a {config.model_type} decoder: "
                         f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
    weights = {name: torch.cat([state[part] for part in checkpoint_names(name)]).to(dtype) for name in ours}
    wrong = [(name, tuple(w.shape), tuple(shapes[name].shape)) for name, w in weights.items()
             if w.shape != shapes[name].shape]
    if wrong:
        name, got, want = wrong[0]
        raise ValueError(f"checkpoint {folder}: {name} has shape {got}, but config.json implies {want} "
                         f"({len(wrong)} weight{'s' if len(wrong) > 1 else ''} disagree with the config)")
    model.load_state_dict(weights, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = rope_inv_freq(config)  # the buffer was built on the meta device
    return model.to(device).eval()


# The files a Hugging Face tokenizer is built from (fast tokenizers, SentencePiece, BPE vocabularies).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(path):
    """The ``transformers`` tokenizer saved in a local checkpoint folder (never downloads).

    A Llama folder whose ``tokenizer_config.json`` names the generic fast tokenizer
    (``PreTrainedTokenizerFast``, as the demo pair's does) loads it with that class, the one
    ``AutoTokenizer`` picks there too, without the 2 s (on a 2-core CPU) that ``AutoTokenizer`` spends
    importing transformers' model-loading code. Everything else goes through ``AutoTokenizer``, which
    for some model types (Qwen2, for one) overrides the class a folder names.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"tokenizer folder not found: {folder}")
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{folder} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); "
                                "save one there with tokenizer.save_pretrained(folder)")
    generic = _json_field(folder / "tokenizer_config.json", "tokenizer_class") == "PreTrainedTokenizerFast"
    llama = _json_field(folder / "config.json", "model_type") == "llama"
    if generic and llama and (folder / "tokenizer.json").exists():
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _json_field(path: Path, key: str):
    """``key`` of the JSON object in ``path``; None if there is no such file, object or key."""
    try:
        return json.loads(path.read_text()).get(key)
    except (OSError, ValueError, AttributeError):  # no file, not JSON, not an object: AutoTokenizer decides
        return None


def hf_dtype(dtype: torch.dtype) -> dict:
    """The keyword that sets the dtype of ``transformers``' ``from_pretrained``: ``dtype`` from 4.56
    on (where 5.x loads a checkpoint in its stored dtype unless told), ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}
