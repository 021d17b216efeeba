"""Edges of the command lines and of the oracle's adapters and gallery: every option reaches the code it is for
(and each default is the documented one), bad input is refused before anything is loaded or imported, exit
statuses and ``--json`` fields say what happened, the adapters leave the caller's state alone, and each known bug
stays broken in the one way its docstring names."""

from __future__ import annotations

import inspect
import json
import sys
from types import SimpleNamespace

import pytest
import torch

import minibass
from minibass import __main__ as cli
from minibass import oracle, zoo
from minibass.attention import BACKENDS
from minibass.bench import common
from minibass.oracle import adapters, known_bugs
from minibass.oracle.cli import seed_value


def _exit(argv, capsys):
    """(exit status, stdout, stderr) of ``python -m minibass ARGV``, run in this process."""
    with pytest.raises(SystemExit) as exit_status:
        cli.main(argv)
    out, err = capsys.readouterr()
    return exit_status.value.code, out, err


@pytest.fixture
def spies(monkeypatch):
    """The oracle's checks replaced by ones that record what they were given and pass: {check: its arguments}."""
    seen = {}

    def spy(check):
        def record(fn, **kwargs):
            seen[check] = dict(kwargs, fn=fn)
            return oracle.Verdict("stub", [oracle.Check(f"{check} row", "nothing", 0.0, 1.0, True)])
        return record

    for check in ("check_sampler", "check_attention", "check_generator", "check_given_uniforms"):
        monkeypatch.setattr(oracle, check, spy(check))
    return seen


# --- python -m minibass oracle ----------------------------------------------------------------------------------

def test_each_oracle_check_gets_the_documented_defaults(spies, capsys):
    code, out, _ = _exit(["oracle", "sampler", "minibass", "--json"], capsys)
    assert code == 0
    sampler = spies["check_sampler"]
    assert (sampler["rows"], sampler["alpha"], sampler["seed"]) == (200_000, 1e-6, 0)
    assert spies["check_given_uniforms"]["dtype"] == torch.float64  # the adapter brings its uniforms
    # The adapter's own uniforms are the step under test: its rows keep their names.
    assert [c["name"] for c in json.loads(out)["checks"]] == ["check_sampler row", "check_given_uniforms row"]

    assert _exit(["oracle", "attention", "minibass"], capsys)[0] == 0
    attention = spies["check_attention"]
    assert (attention["cases"], attention["dtypes"], attention["device"], attention["seed"],
            attention["head_dims"]) == (200, (torch.float32,), None, 0, None)

    assert _exit(["oracle", "generator", "minibass"], capsys)[0] == 0
    generator = spies["check_generator"]
    assert (generator["samples"], generator["n_tokens"], generator["head_dim"], generator["alpha"],
            generator["seed"]) == (20_000, 3, 8, 1e-6, 0)
    assert generator["sampling"] == minibass.SamplingParams(temperature=1.0, top_k=0, top_p=1.0)


def test_each_oracle_option_reaches_its_check(spies, capsys):
    argv = ["oracle", "sampler", "minibass.rejection:rejection_sample", "--rows", "1000", "--alpha", "0.01",
            "--seed", "7"]
    assert _exit(argv, capsys)[0] == 0
    sampler = spies["check_sampler"]
    assert (sampler["rows"], sampler["alpha"], sampler["seed"]) == (1000, 0.01, 7)

    argv = ["oracle", "attention", "minibass", "--cases", "3", "--dtypes", "float16", "bfloat16", "--device", "cpu",
            "--seed", "5", "--head-dims", "64"]
    assert _exit(argv, capsys)[0] == 0
    attention = spies["check_attention"]
    assert (attention["cases"], attention["dtypes"], attention["device"], attention["seed"],
            attention["head_dims"]) == (3, (torch.float16, torch.bfloat16), "cpu", 5, [64])

    argv = ["oracle", "generator", "minibass", "--samples", "100", "--n-tokens", "4", "--head-dim", "16",
            "--temperature", "0.5", "--top-k", "3", "--top-p", "0.8", "--alpha", "0.001", "--seed", "2"]
    assert _exit(argv, capsys)[0] == 0
    generator = spies["check_generator"]
    assert (generator["samples"], generator["n_tokens"], generator["head_dim"], generator["alpha"],
            generator["seed"]) == (100, 4, 16, 0.001, 2)
    assert generator["sampling"] == minibass.SamplingParams(temperature=0.5, top_k=3, top_p=0.8)


def test_seed_zero_and_the_largest_seed_are_taken_and_two_to_the_63_is_not(spies, capsys):
    assert seed_value("0") == 0 and seed_value(str(2 ** 63 - 1)) == 2 ** 63 - 1
    code, _, err = _exit(["oracle", "sampler", "minibass", "--seed", "0"], capsys)
    assert code == 0 and spies["check_sampler"]["seed"] == 0, err
    code, _, err = _exit(["oracle", "sampler", "minibass", "--seed", str(2 ** 63)], capsys)
    assert code == 2 and "--seed: must be an int in [0, 2**63)" in err


def test_a_bad_alpha_is_refused_before_the_engine_is_imported(tmp_path, monkeypatch, capsys):
    """Importing an engine can take minutes (CUDA kernels, weights): a bad option costs nothing."""
    (tmp_path / "heavy_engine.py").write_text("raise RuntimeError('imported before the options were checked')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for kind in ("sampler", "generator"):
        code, _, err = _exit(["oracle", kind, "heavy_engine:step", "--alpha", "0"], capsys)
        assert code == 2 and "alpha (the false-alarm rate) must lie strictly between 0 and 1" in err
        assert "imported before" not in err


def test_a_target_in_the_current_directory_is_found_however_the_cli_was_started(tmp_path, monkeypatch, spies,
                                                                                 capsys):
    """As ``python -m`` does, the current directory is searched even where ``sys.path`` lacks it (an entry point,
    ``main()`` called from a script elsewhere)."""
    (tmp_path / "engine_in_cwd.py").write_text("def sampler(*args, **kwargs):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    try:
        code, _, err = _exit(["oracle", "sampler", "engine_in_cwd:sampler"], capsys)
    finally:
        sys.modules.pop("engine_in_cwd", None)
    assert code == 0, err
    assert spies["check_sampler"]["fn"].__module__ == "engine_in_cwd"


def test_a_target_that_is_not_callable_is_a_usage_error(spies, capsys):
    code, _, err = _exit(["oracle", "sampler", "minibass.oracle.cli:DTYPES"], capsys)
    assert code == 2 and "TARGET 'minibass.oracle.cli:DTYPES' is not callable" in err
    assert "check_sampler" not in spies  # nothing ran


def test_the_oracles_help_reads_as_plain_text_in_a_terminal(capsys):
    """The subcommand's description is its module docstring, without the docstring's ``code`` marks."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["oracle", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "TARGET is package.module:function (imported from the current directory and sys.path)" in out
    assert "``" not in out


def test_the_command_line_runs_without_docstrings():
    """``python -OO`` strips docstrings, and the oracle's help is built from one."""
    import subprocess

    run = subprocess.run([sys.executable, "-OO", "-m", "minibass", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "oracle" in run.stdout


def test_a_target_may_name_an_attribute_of_an_attribute(spies, capsys):
    code, _, err = _exit(["oracle", "sampler", "minibass.oracle:known_bugs.textbook"], capsys)
    assert code == 0, err
    assert spies["check_sampler"]["fn"] is known_bugs.textbook


# --- python -m minibass generate / demo -----------------------------------------------------------------------

@pytest.fixture
def decode_calls(monkeypatch):
    """minibass.generate and minibass.speculative_generate, watched: [(name, kwargs, result)] of each call."""
    calls = []
    for name in ("generate", "speculative_generate"):
        def watched(*args, _real=getattr(minibass, name), _name=name, **kwargs):
            result = _real(*args, **kwargs)
            calls.append((_name, kwargs, result))
            return result
        monkeypatch.setattr(minibass, name, watched)
    return calls


def test_generate_passes_sampling_seed_attention_and_draft_length_on(decode_calls, capsys):
    argv = ["generate", "--prompt", "def add(a, b):\n", "--max-new-tokens", "2", "--temperature", "0.7", "--top-k", "5",
            "--top-p", "0.9", "--seed", "3", "--attention", "naive", "--draft-length", "2", "--ignore-eos"]
    code, _, err = _exit(argv, capsys)
    assert code == 0, err
    [(name, kwargs, _)] = decode_calls
    assert name == "speculative_generate"
    assert kwargs["sampling"] == minibass.SamplingParams(temperature=0.7, top_k=5, top_p=0.9)
    assert (kwargs["seed"], kwargs["attention"], kwargs["draft_length"], kwargs["eos_token_id"]) == (3, "naive", 2,
                                                                                                      None)
    # Without --ignore-eos a completion ends at the end tokens the target's folder names.
    target_dir, _ = zoo.demo_paths()
    code, _, err = _exit(["generate", "--target", str(target_dir), "--prompt", "x", "--max-new-tokens", "1"], capsys)
    assert code == 0, err
    name, kwargs, _ = decode_calls[-1]
    assert name == "generate"  # a target alone: regular decoding
    assert kwargs["eos_token_id"] == cli._eos_ids(target_dir, minibass.load_tokenizer(target_dir))
    assert kwargs["eos_token_id"] and kwargs["sampling"] == minibass.SamplingParams(temperature=0.0)


def test_generate_encodes_prompts_as_the_tokenizer_does_by_default(monkeypatch, capsys):
    """A Llama tokenizer adds a BOS token by default, and the model was trained with it: the command line
    encodes as ``tokenizer.encode(text)`` does (and as transformers' pipelines do), not without it."""
    target, draft, tokenizer = zoo.load_demo_pair()

    class AddsBos:  # the demo tokenizer, as a tokenizer that adds token 7 in front by default
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def encode(self, text, add_special_tokens=True):
            return [7] * add_special_tokens + tokenizer.encode(text, add_special_tokens=False)

    real_generate, prompts = minibass.generate, []

    def generate(model, p, n, **kwargs):
        prompts.append(p)
        return real_generate(model, p, n, **kwargs)

    monkeypatch.setattr(cli, "_load", lambda args: (target, None, AddsBos()))
    monkeypatch.setattr(minibass, "generate", generate)
    code, _, err = _exit(["generate", "--prompt", "import os", "--max-new-tokens", "1", "--ignore-eos"], capsys)
    assert code == 0, err
    assert prompts == [[[7] + tokenizer.encode("import os", add_special_tokens=False)]]


def test_generate_refuses_a_draft_length_it_would_not_use(decode_calls, capsys):
    """A target alone decodes without a draft: a --draft-length there would be ignored without a word. A bad
    one is refused before anything loads, with or without a draft."""
    target_dir, _ = zoo.demo_paths()
    code, _, err = _exit(["generate", "--target", str(target_dir), "--prompt", "x", "--draft-length", "3"], capsys)
    assert code == 2 and "--draft-length needs --draft" in err and not decode_calls
    code, _, err = _exit(["generate", "--target", str(target_dir), "--prompt", "x", "--draft-length", "bogus"], capsys)
    assert code == 2 and "got 'bogus'" in err and not decode_calls
    code, _, err = _exit(["generate", "--prompt", "x", "--max-new-tokens", "2", "--ignore-eos"], capsys)
    assert code == 0 and decode_calls[-1][1]["draft_length"] == "dynamic"  # the demo pair: BASS's length by default


@pytest.mark.parametrize("command", ["demo", "generate"])
def test_a_bad_seed_is_refused_before_the_models_load(command, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_load", lambda args: pytest.fail("loaded the models before checking the seed"))
    argv = [command, "--seed", "-1"] + (["--prompt", "x"] if command == "generate" else [])
    code, _, err = _exit(argv, capsys)
    assert code == 2 and "seed must be None, an int in [0, 2**63)" in err and "got -1" in err


def test_generate_json_reports_the_runs_own_stats(decode_calls, capsys):
    argv = ["generate", "--prompt", "import os\n", "--prompt", "x = [", "--max-new-tokens", "6", "--draft-length", "2",
            "--ignore-eos", "--json"]
    code, out, err = _exit(argv, capsys)
    assert code == 0, err
    [(_, _, result)] = decode_calls
    payload, s = json.loads(out), result.stats
    assert payload["tokens"] == result.tokens and len(payload["completions"]) == 2
    assert payload["stats"] == {
        "steps": s.steps, "target_calls": s.target_calls, "draft_calls": s.draft_calls,
        "draft_lengths": s.draft_lengths, "acceptance_rate": s.acceptance_rate,
        "tokens_per_target_call": s.tokens_per_target_call, "new_tokens": s.new_tokens, "wall_time_s": s.wall_time,
        "tokens_per_second": s.tokens_per_second, "time_split_s": s.time_split}
    assert s.draft_calls != s.target_calls and s.new_tokens == 12  # fields that could be mistaken for each other


def test_a_draft_without_a_target_is_a_usage_error(monkeypatch, capsys):
    _, draft_dir = zoo.demo_paths()
    for command in ("generate", "demo"):
        argv = [command, "--draft", str(draft_dir)] + (["--prompt", "x"] if command == "generate" else [])
        code, out, err = _exit(argv, capsys)
        assert code == 2 and "--draft needs --target too" in err and out == ""


@pytest.mark.parametrize("option", ["--repeats", "--prompts", "--max-new-tokens", "--batch-size"])
def test_demo_refuses_counts_below_one_before_loading_anything(option, monkeypatch, capsys):
    def never(args):
        raise AssertionError("loaded the models before checking the options")

    monkeypatch.setattr(cli, "_load", never)
    code, out, err = _exit(["demo", option, "0"], capsys)
    assert code == 2 and f"{option} must be >= 1, got 0" in err and out == ""


def test_demo_refuses_a_bad_draft_length_before_loading_anything(monkeypatch, capsys):
    def never(args):
        raise AssertionError("loaded the models before checking the options")

    monkeypatch.setattr(cli, "_load", never)
    code, out, err = _exit(["demo", "--draft-lengths", "2", "sometimes"], capsys)
    assert code == 2 and "draft_length must be an int >= 1" in err


def test_the_demo_needs_a_draft(capsys):
    target_dir, _ = zoo.demo_paths()
    code, _, err = _exit(["demo", "--target", str(target_dir)], capsys)
    assert code == 2 and "the demo compares speculative decoding against regular decoding: give --draft too" in err


def test_a_draft_with_another_vocabulary_is_refused(monkeypatch, capsys):
    target_dir, draft_dir = zoo.demo_paths()
    real = minibass.load_tokenizer

    def load_tokenizer(folder):
        tokenizer = real(folder)
        if str(folder) == str(draft_dir):  # the draft's vocabulary, one token renamed
            vocab = dict(tokenizer.get_vocab())
            vocab["renamed"] = vocab.pop(next(iter(vocab)))
            return SimpleNamespace(get_vocab=lambda: vocab)
        return tokenizer

    monkeypatch.setattr(minibass, "load_tokenizer", load_tokenizer)
    argv = ["generate", "--target", str(target_dir), "--draft", str(draft_dir), "--prompt", "x", "--max-new-tokens",
            "1"]
    code, _, err = _exit(argv, capsys)
    assert code == 2 and "differ; speculative decoding needs the draft to share the target's vocabulary" in err
    # A draft folder without tokenizer files (loading raises OSError or ValueError): only the vocab sizes count.
    for error in (OSError, ValueError):
        def without_files(folder, _error=error):
            if str(folder) == str(draft_dir):
                raise _error("no tokenizer files")
            return real(folder)

        monkeypatch.setattr(minibass, "load_tokenizer", without_files)
        code, _, err = _exit(argv, capsys)
        assert code == 0, err


def test_the_demo_exits_1_when_a_speculative_run_differs_from_regular_decoding(monkeypatch, capsys):
    """The demo's greedy check is its exit status: a policy whose output differs (here k = 3, the second one) makes
    it 1, with MISMATCH said."""
    real = minibass.speculative_generate

    def k3_wrong(*args, **kwargs):
        result = real(*args, **kwargs)
        if kwargs.get("draft_length") == 3 and kwargs["sampling"].greedy:
            result.tokens[0][-1] = (result.tokens[0][-1] + 1) % 64
        return result

    monkeypatch.setattr(minibass, "speculative_generate", k3_wrong)
    monkeypatch.setattr(common, "call_costs", lambda target, draft, batch, verify_tokens: {  # not timed here
        "regular": 1.0, "draft": 0.1, "verify": 1.5})
    args = cli.build_parser().parse_args(["demo", "--batch-size", "2", "--prompts", "2", "--max-new-tokens", "3",
                                          "--draft-lengths", "2", "3", "--repeats", "1"])
    assert cli.demo(args) == 1
    out = capsys.readouterr().out
    assert "speculative output != regular output" in out and "MISMATCH" in out


# --- adapters -----------------------------------------------------------------------------------------------------

def _rejection_inputs(rows=200, k=2, vocab=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    draft_probs = torch.softmax(torch.randn(rows, k, vocab, generator=g), -1)
    target_probs = torch.softmax(torch.randn(rows, k + 1, vocab, generator=g), -1)
    draft_tokens = torch.multinomial(draft_probs.reshape(-1, vocab), 1, generator=g).reshape(rows, k)
    return draft_tokens, draft_probs, target_probs


def test_the_transformers_sampler_draws_from_its_generator_and_leaves_the_callers_state_alone():
    inputs = _rejection_inputs()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(5)
        expected = torch.rand(3)
        torch.manual_seed(5)
        first = adapters.transformers_sampler(*inputs, generator=torch.Generator().manual_seed(1))
        assert torch.equal(torch.rand(3), expected)  # the global random state as it was
        assert torch.get_num_threads() == 2  # the caller's thread count back
        torch.manual_seed(99)  # another global state: the generator alone decides
        again = adapters.transformers_sampler(*inputs, generator=torch.Generator().manual_seed(1))
        other = adapters.transformers_sampler(*inputs, generator=torch.Generator().manual_seed(2))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_the_transformers_given_uniforms_adapter_puts_rand_like_back():
    original = torch.rand_like
    tokens, q, p = _rejection_inputs(rows=4)
    adapters.transformers_given_uniforms(tokens, q, p, torch.full((4, 2), 0.5), torch.full((4,), 0.5))
    assert torch.rand_like is original


# --- the known-bug gallery -----------------------------------------------------------------------------------------

def test_the_gallery_holds_every_broken_part_the_module_defines():
    """A broken sampler or kernel written in ``known_bugs`` but missing from its table is tested by nothing."""
    functions = {name: f for name, f in vars(known_bugs).items()
                 if inspect.isfunction(f) and f.__module__ == known_bugs.__name__ and not name.startswith("_")}
    parameters = {name: list(inspect.signature(f).parameters) for name, f in functions.items()}
    samplers = {n for n, p in parameters.items() if p == ["draft_tokens", "draft_probs", "target_probs", "generator"]}
    uniform = {n for n, p in parameters.items() if p[3:] == ["u_accept", "u_next"]}
    kernels = {n for n, p in parameters.items() if p[:3] == ["q", "k_cache", "v_cache"]}
    assert set(known_bugs.SAMPLERS) == samplers - {"textbook"} and len(known_bugs.SAMPLERS) == 10
    assert set(known_bugs.UNIFORM_SAMPLERS) == uniform and set(known_bugs.ATTENTION) == kernels
    assert len(known_bugs.ATTENTION) == 6
    assert all(known_bugs.SAMPLERS[n] is functions[n] for n in known_bugs.SAMPLERS)


def _ragged(n_seqs, *, heads=2, head_dim=8, kv_len=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_seqs, heads, head_dim, generator=g)  # one query token per sequence
    k_cache = torch.randn(n_seqs, heads, kv_len, head_dim, generator=g)
    v_cache = torch.randn(n_seqs, heads, kv_len, head_dim, generator=g)
    return q, k_cache, v_cache, torch.ones(n_seqs, dtype=torch.long), torch.full((n_seqs,), kv_len)


def test_the_eight_sequence_table_loses_exactly_the_sequences_past_the_eighth():
    inputs = _ragged(10)
    right, broken = BACKENDS["naive"](*inputs), known_bugs.eight_sequence_table(*inputs)
    assert torch.equal(broken[:8], right[:8]) and (right[8:] != 0).any(-1).all()
    assert torch.equal(broken[8:], torch.zeros_like(broken[8:]))


def test_softmax_without_max_overflows_in_half_precision_where_float32_does_not():
    """exp is taken in the inputs' dtype: a score of 20 overflows float16 (past 11.09) but not float32 (88.7)."""
    q = torch.zeros(1, 1, 4)
    q[0, 0, 0] = 20.0
    k_cache = torch.zeros(1, 1, 2, 4)
    k_cache[0, 0, 0, 0] = 1.0  # scores 20 and 0
    v_cache = torch.randn(1, 1, 2, 4, generator=torch.Generator().manual_seed(0))
    lens = (torch.tensor([1]), torch.tensor([2]))
    as_float32 = known_bugs.softmax_without_max(q, k_cache, v_cache, *lens, scale=1.0)
    assert torch.allclose(as_float32, BACKENDS["naive"](q, k_cache, v_cache, *lens, scale=1.0), atol=1e-6)
    as_float16 = known_bugs.softmax_without_max(q.half(), k_cache.half(), v_cache.half(), *lens, scale=1.0)
    assert as_float16.isnan().all()
