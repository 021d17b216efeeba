"""The shipped demo pair, the training script's fast mode, and the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import minibass
from minibass import zoo
from minibass.loading import hf_dtype
from conftest import script as load_script

FP32_TOL = 1e-4


@pytest.fixture(scope="module")
def pair():
    return zoo.load_demo_pair()


@pytest.fixture(scope="module")
def hf_pair():
    from transformers import AutoModelForCausalLM

    target_dir, draft_dir = zoo.demo_paths()
    return tuple(AutoModelForCausalLM.from_pretrained(d, **hf_dtype(torch.float32)).eval() for d in (target_dir, draft_dir))


def test_zoo_and_oracle_are_attributes_of_the_package_without_importing_them():
    """``import minibass`` then ``minibass.zoo.load_demo_pair()``, as the API is spelled; loaded on first use."""
    code = ("import sys, minibass; assert 'minibass.zoo' not in sys.modules and 'minibass.oracle' not in sys.modules; "
            "print(minibass.zoo.demo_paths()[0].name, minibass.oracle.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["target", "minibass.oracle"]
    with pytest.raises(AttributeError, match="has no attribute 'zooo'"):
        minibass.zooo


def test_shipped_pair_is_small_and_documented():
    total = 0
    for folder in zoo.demo_paths():
        for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md"):
            assert (folder / name).exists(), name
        total += sum(f.stat().st_size for f in folder.iterdir())
        card = (folder / "README.md").read_text()
        assert "held-out loss" in card and "T=0,k=4" in card and "T=1,k=4" in card
    assert total < 25e6


def test_the_shipped_prompts_come_from_held_out_files():
    """Every prompt in prompts.json names a file of the training script's held-out split (a hash of the path,
    whatever the Python), and is its text (where this Python is the one the prompts were cut from)."""
    import platform

    from minibass.zoo.train import corpus_files

    import hashlib

    _, held, root = corpus_files()
    held = {p.relative_to(root).as_posix(): p for p in held}
    data = json.loads((Path(zoo.__file__).parent / "demo" / "prompts.json").read_text())
    prompts = data["prompts"]
    assert len(prompts) == 29
    assert all(int(hashlib.sha256(p["file"].encode()).hexdigest(), 16) % 20 == 0 for p in prompts)  # the split's rule
    if f"Python {platform.python_version()}." in data["about"]:
        assert all(p["text"] in held[p["file"]].read_text(encoding="utf-8", errors="replace") for p in prompts)


def test_logits_match_transformers(pair, hf_pair):
    target, draft, tokenizer = pair
    ids = tokenizer.encode(zoo.demo_prompts(1)[0], add_special_tokens=False)
    for ours, theirs in zip((target, draft), hf_pair):
        logits = ours(torch.tensor(ids), torch.tensor([len(ids)]), ours.init_cache(1, len(ids)), attention="naive")
        with torch.no_grad():
            ref = theirs(torch.tensor([ids])).logits[0]
        assert (logits - ref).abs().max() <= FP32_TOL


def test_tokenizer_round_trips_held_out_text(pair):
    from minibass.zoo.train import corpus_files

    _, _, tokenizer = pair
    for path in corpus_files()[1][:5]:  # held-out files
        text = path.read_text(encoding="utf-8")
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_greedy_outputs_match_transformers_on_demo_prompts(pair, hf_pair):
    target, draft, tokenizer = pair
    hf_target = hf_pair[0]
    hf_target.generation_config.eos_token_id = None
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(4)]
    greedy = minibass.SamplingParams(temperature=0)
    ours = minibass.generate(target, prompts, 16, sampling=greedy, attention="padded").tokens
    spec = minibass.speculative_generate(target, draft, prompts, 16, sampling=greedy, attention="split").tokens
    assert spec == ours
    for prompt, tokens in zip(prompts, ours):
        with torch.no_grad():
            ref = hf_target.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False,
                                     pad_token_id=tokenizer.eos_token_id)
        assert ref[0, len(prompt):].tolist() == tokens


def _same_weights(a, b) -> bool:
    from safetensors.torch import load_file

    a, b = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_training_resumes_exactly_where_it_stopped(tmp_path):
    """Stopped by --max-minutes and carried on with --resume, training ends with the same weights
    as an uninterrupted run (data stream, optimizer and step restored), and the card names both parts."""
    from minibass.zoo import train

    train.main(["--out", str(tmp_path / "whole"), "--fast"])
    train.main(["--out", str(tmp_path / "parts"), "--fast", "--max-minutes", "0"])  # stops after one step
    assert (tmp_path / "parts" / "_work" / "target.pt").exists() and not (tmp_path / "parts" / "target").exists()
    train.main(["--out", str(tmp_path / "parts"), "--fast", "--resume"])
    for name in ("target", "draft"):
        assert _same_weights(tmp_path / "whole" / name, tmp_path / "parts" / name), name
    assert json.loads((tmp_path / "parts" / "prompts.json").read_text())["prompts"]
    card = (tmp_path / "parts" / "draft" / "README.md").read_text()  # each part, and how long it ran
    assert re.search(r"--fast --max-minutes 0` \(\d+\.\d min\) then `python -m minibass\.zoo\.train --out "
                     + re.escape(str(tmp_path / "parts")) + r" --fast --resume` \(\d+\.\d min\)", card), card
    parts = json.loads((tmp_path / "parts" / "metrics.json").read_text())["parts"]
    assert [p["command"].split()[-1] for p in parts] == ["0", "--resume"] and all(p["minutes"] >= 0 for p in parts)
    assert "(killed: time not recorded)" in train.part_words({"argv": ["--out", "x"], "minutes": None})


def test_training_resumes_exactly_when_stopped_while_distilling_on_the_targets_text(tmp_path, monkeypatch):
    """A run that trains its target, writes the target's continuations (--on-policy) and is stopped while
    distilling the draft ends, resumed, with the draft of an uninterrupted run: the saved bfloat16 copy of the
    target is a copy, so both distil from the same float32 target."""
    import time

    from minibass.zoo import train

    on_policy = ["--fast", "--on-policy", "4"]
    train.main(["--out", str(tmp_path / "whole"), *on_policy])
    fit = train.fit

    def draft_stops(model, steps, data, generator, lr, loss, desc, checkpoint, deadline, monitor=None):
        return fit(model, steps, data, generator, lr, loss, desc, checkpoint,
                   time.time() - 1 if desc == "draft" else deadline, monitor)  # the draft stops after one step

    monkeypatch.setattr(train, "fit", draft_stops)
    train.main(["--out", str(tmp_path / "parts"), *on_policy])
    monkeypatch.undo()
    assert (tmp_path / "parts" / "_work" / "draft.pt").exists() and not (tmp_path / "parts" / "draft").exists()
    train.main(["--out", str(tmp_path / "parts"), *on_policy, "--resume"])
    for name in ("target", "draft"):
        assert _same_weights(tmp_path / "whole" / name, tmp_path / "parts" / name), name


def test_training_options_are_checked_before_any_work(tmp_path, capsys):
    """Bad options, a --resume that changes the run's options or has nothing to resume: usage errors (exit 2)
    before any training; --fast sets small defaults, not the options given."""
    from minibass.zoo import train

    out = str(tmp_path / "run")
    for options, says in [(["--draft-shape", "0x64"], "LAYERS >= 1"), (["--target-shape", "12"], "LAYERSxHIDDEN"),
                          (["--draft-shape", "1x100"], "multiple of 32"), (["--target-steps", "0"], ">= 1"),
                          (["--seq-len", "2000"], "--seq-len must be in [2, 1024]"),
                          (["--max-minutes", "-1"], ">= 0"), (["--batch", "1", "--on-policy", "4"], "--batch >= 2"),
                          (["--target-from", str(tmp_path)], "no config.json"),
                          (["--on-policy", "4", "--seq-len", "16"], "--seq-len >= 32"),
                          (["--draft-init", "target", "--draft-shape", "1x32"], "as wide as the target"),
                          (["--resume"], "holds no unfinished run")]:
        with pytest.raises(SystemExit) as exit_status:
            train.main(["--out", out, "--fast", *options])
        err = capsys.readouterr().err
        assert exit_status.value.code == 2 and says in err and "Traceback" not in err, (options, err)
        assert not (tmp_path / "run").exists(), options  # refused before any work
    train.main(["--out", out, "--fast", "--draft-steps", "2", "--max-minutes", "0"])  # stops after one target step
    with pytest.raises(SystemExit):
        train.main(["--out", out, "--fast", "--draft-steps", "3", "--resume"])
    assert "--draft-steps 2 -> 3" in capsys.readouterr().err
    train.main(["--out", out + "/", "--fast", "--draft-steps", "2", "--resume", "--max-minutes", "5"])  # OUT respelt
    assert "| training | 2 steps," in (tmp_path / "run" / "draft" / "README.md").read_text()


def test_a_new_draft_is_distilled_from_a_kept_target(tmp_path):
    """--target-from keeps a trained target (weights, tokenizer, card) and distils only a new draft."""
    from safetensors.torch import load_file

    from minibass.zoo import train

    train.main(["--out", str(tmp_path / "first"), "--fast"])
    train.main(["--out", str(tmp_path / "second"), "--fast", "--seed", "1", "--target-from",
                str(tmp_path / "first" / "target")])
    kept, first = (load_file(tmp_path / d / "target" / "model.safetensors") for d in ("second", "first"))
    assert all(torch.equal(kept[k], first[k]) for k in first)
    drafts = [load_file(tmp_path / d / "draft" / "model.safetensors") for d in ("first", "second")]
    assert any(not torch.equal(drafts[0][k], drafts[1][k]) for k in drafts[0])
    card = (tmp_path / "second" / "draft" / "README.md").read_text()
    assert "--target-from" in card
    metrics = json.loads((tmp_path / "second" / "metrics.json").read_text())
    target_card = (tmp_path / "second" / "target" / "README.md").read_text()
    assert f"T=0,k=4: {metrics['acceptance']['T=0,k=4']}" in target_card  # the pair's acceptance, updated


def test_a_draft_goes_on_distilling_half_on_text_the_target_wrote(tmp_path):
    """--draft-from starts from a trained draft; --on-policy N mixes N target-written continuations into
    half of every batch; --draft-loss tv trains on the total-variation distance; the card and metrics say
    so; --draft-from alone is refused."""
    from minibass.zoo import train

    train.main(["--out", str(tmp_path / "first"), "--fast"])
    first = tmp_path / "first"
    train.main(["--out", str(tmp_path / "second"), "--fast", "--target-from", str(first / "target"),
                "--draft-from", str(first / "draft"), "--on-policy", "4", "--draft-steps", "2", "--draft-loss", "tv"])
    card = (tmp_path / "second" / "draft" / "README.md").read_text()
    assert "4 continuations written by the target" in card and f"started from the draft in `{first / 'draft'}`" in card
    assert "total-variation distance" in card and "KL to its" in (first / "draft" / "README.md").read_text()
    metrics = json.loads((tmp_path / "second" / "metrics.json").read_text())
    assert "draft_on_policy_text" in metrics["minutes"] and metrics["draft_loss"] == "tv"
    # The same run with the default loss ends elsewhere: the option reaches the gradient, not just the card.
    from safetensors.torch import load_file

    train.main(["--out", str(tmp_path / "kl"), "--fast", "--target-from", str(first / "target"),
                "--draft-from", str(first / "draft"), "--on-policy", "4", "--draft-steps", "2"])
    tv, kl = (load_file(tmp_path / d / "draft" / "model.safetensors") for d in ("second", "kl"))
    assert any(not torch.equal(tv[k], kl[k]) for k in tv)
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path / "third"), "--fast", "--draft-from", str(first / "draft")])

    with pytest.raises(SystemExit):  # a new draft from the target, or go on with a trained one: not both
        train.main(["--out", str(tmp_path / "fourth"), "--fast", "--target-from", str(first / "target"),
                    "--draft-from", str(first / "draft"), "--draft-init", "target"])

    # The first half of the continuations is the target's greedy text, the second half sampled.
    stream = torch.randint(0, 300, (500,), generator=torch.Generator().manual_seed(0))
    rows = train.target_continuations(first / "target", stream, 4, 31, 8, torch.Generator().manual_seed(1))
    target = minibass.load_model(first / "target")
    greedy = minibass.generate(target, rows[:, :8].tolist(), 24, sampling=minibass.SamplingParams(temperature=0)).tokens
    assert rows.shape == (4, 32) and rows[:2, 8:].tolist() == greedy[:2] and rows[2:, 8:].tolist() != greedy[2:]

    stream, written = torch.zeros(100, dtype=torch.long), torch.ones(3, 9, dtype=torch.long)
    batch = next(train.mixed_batches(stream, written, 5, 8, torch.Generator().manual_seed(0)))
    assert batch.shape == (5, 9) and batch.sum(1).tolist() == [0, 0, 0, 9, 9]  # 3 windows of the stream, 2 written


def test_demo_prompts_are_shipped_data_and_the_runtime_never_imports_training_code():
    script = (
        "import runpy, sys\n"
        "sys.argv = ['minibass', 'demo', '--max-new-tokens', '3', '--batch-size', '2', '--draft-lengths', '2',\n"
        "            '--repeats', '1', '--prompts', '2']\n"
        "try:\n"
        "    runpy.run_module('minibass', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "from minibass import zoo\n"
        "zoo.load_demo_pair(); assert len(zoo.demo_prompts(50)) >= 16\n"
        "assert 'minibass.zoo.train' not in sys.modules, 'the runtime imported the training code'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "greedy check" in done.stdout


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "minibass", *args], capture_output=True, text=True, timeout=600)


def test_demo_end_to_end():
    result = run_cli("demo", "--batch-size", "2", "--prompts", "3", "--max-new-tokens", "6", "--repeats", "3",
                     "--attention", "split", "--draft-lengths", "2", "auto")
    assert result.returncode == 0, result.stderr
    for text in ("4 held-out prompts", "in 2 batches of 2",  # 3 prompts asked: whole batches, so 4
                 "speculative, k = 2", "speculative, k = auto", "one draft call", "Reading:", "the loop's own work",
                 "the speed-up in the table", "temperature 0.8",
                 "greedy check", "for all 4 prompts", "OK"):
        assert text in " ".join(result.stdout.split()), text  # the reading is wrapped: compare with one space
    assert "<|endoftext|>" not in result.stdout  # the sampled completion stops at end-of-text


@pytest.mark.parametrize("seconds, rounds", [(0.0, 3), (1e9, 5)])
def test_demo_runs_three_rounds_not_five_when_five_would_take_past_a_minute(monkeypatch, capsys, seconds, rounds):
    """By default the demo runs 5 rounds, or 3 when the first 3 show that 5 would not end in time."""
    from minibass import __main__ as cli

    assert cli._all_rounds_fit(10.0, 2.0) and not cli._all_rounds_fit(32.0, 8.0)  # a quiet machine; a slow spell
    calls = []
    regular = minibass.generate
    monkeypatch.setattr(minibass, "generate", lambda *a, **k: calls.append(1) or regular(*a, **k))
    monkeypatch.setattr(cli, "DEMO_SECONDS", seconds)
    args = cli.build_parser().parse_args(["demo", "--batch-size", "2", "--prompts", "2", "--max-new-tokens", "3",
                                          "--draft-lengths", "2"])
    assert cli.demo(args) == 0
    assert len(calls) == 1 + rounds  # the warm-up, then one regular run a round (one batch of prompts)
    out = capsys.readouterr().out
    assert ("3 rounds; --repeats 5 asks for 5" in out) == (rounds == 3)
    assert "greedy check" in out and "OK" in out


def test_demo_times_every_method_on_each_batch_back_to_back():
    """The demo's order: per round and batch, regular decoding first, then every policy once, the
    policies' order rotated by one from batch to batch and round to round."""
    from minibass.__main__ import _schedule

    order = _schedule(2, 3, [1, "auto"])
    assert len(order) == 2 * 3 * 3
    for r in range(2):
        for b in range(3):
            block = order[(r * 3 + b) * 3:(r * 3 + b + 1) * 3]
            assert [(rr, bb) for rr, bb, _ in block] == [(r, b)] * 3  # one batch's runs together
            assert block[0][2] is None and sorted(map(str, (p for _, _, p in block[1:]))) == ["1", "auto"]
    firsts = [block_first for _, _, block_first in order[1::3]]  # the policy run right after each regular run
    assert firsts == [1, "auto", 1, "auto", 1, "auto"]


def test_forward_clock_times_each_model_apart_and_restores_their_forward():
    """The demo splits a run's wall time into the two models' forward calls (one ``forward_clock`` each)
    and the rest (the host work)."""
    import time

    from minibass.bench.common import forward_clock

    target, draft, tokenizer = zoo.load_demo_pair()
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(2)]
    greedy = minibass.SamplingParams(temperature=0)
    with forward_clock(target, device="cpu") as target_clock, forward_clock(draft, device="cpu") as draft_clock:
        started = time.perf_counter()
        result = minibass.speculative_generate(target, draft, prompts, 8, draft_length=3, sampling=greedy)
        wall = time.perf_counter() - started
    assert target_clock["seconds"] > 0 and draft_clock["seconds"] > 0
    assert target_clock["seconds"] + draft_clock["seconds"] < wall
    assert "forward" not in vars(target) and "forward" not in vars(draft)  # the class's method again
    with forward_clock(target, device="cpu") as clock:
        minibass.generate(draft, prompts, 4, sampling=greedy)  # the draft is not watched
    assert clock["seconds"] == 0.0
    assert result.tokens == minibass.generate(target, prompts, 8, sampling=greedy).tokens


def test_call_costs_share_one_prefill_per_model_and_leave_the_cache_as_they_found_it(pair, monkeypatch):
    """The demo's probes: each model's calls are timed against one prefilled cache (at batch 32 a prefill
    takes as long as a dozen calls), rolled back after every call."""
    from minibass.bench import common

    target, draft, _ = pair
    filled = []
    original = common.filled_cache
    monkeypatch.setattr(common, "filled_cache", lambda model, *a: filled.append(model) or original(model, *a))
    costs = common.call_costs(target, draft, 3, 4, context=10, rounds=2)
    assert filled == [target, draft] and set(costs) == {"regular", "draft", "verify"}
    assert all(ms > 0 for ms in costs.values())
    cache = original(target, 3, 10, 14)
    common.call_ms(target, 3, 10, 4, reps=1, cache=cache)
    assert cache.lengths.tolist() == [10, 10, 10]
    with pytest.raises(ValueError, match="room for 5 more"):
        common.call_ms(target, 3, 10, 5, reps=1, cache=cache)
    with pytest.raises(ValueError, match="must hold 12 tokens"):
        common.call_ms(target, 3, 12, 1, reps=1, cache=cache)
    with pytest.raises(ValueError, match="the cache has 12 layers, the model 1"):
        common.call_ms(draft, 3, 10, 1, reps=1, cache=cache)  # the target's cache


def test_generate_cli_json():
    result = run_cli("generate", "--prompt", "def add(a, b):\n", "--prompt", "import os\n", "--max-new-tokens", "5",
                     "--draft-length", "3", "--json", "--ignore-eos")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert [len(t) for t in payload["tokens"]] == [5, 5] and payload["stats"]["acceptance_rate"] is not None


def test_generate_cli_ends_at_any_eos_the_generation_config_names(tmp_path):
    """Llama 3 style: generation_config.json lists several end tokens; the tokenizer knows one of them."""
    from types import SimpleNamespace

    from minibass.__main__ import _eos_ids

    tokenizer = SimpleNamespace(eos_token_id=7)
    assert _eos_ids(tmp_path, tokenizer) == [7]  # no generation config: the tokenizer's
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 7]}))
    assert _eos_ids(tmp_path, tokenizer) == [7, 9]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 3}))
    assert _eos_ids(tmp_path, SimpleNamespace(eos_token_id=None)) == [3]


def test_generate_cli_errors(tmp_path):
    missing = run_cli("generate", "--target", str(tmp_path / "nope"), "--prompt", "x")
    assert missing.returncode == 2 and "checkpoint folder not found" in missing.stderr
    (tmp_path / "model.safetensors").write_bytes(b"")
    a_file = run_cli("generate", "--target", str(tmp_path / "model.safetensors"), "--prompt", "x")
    assert a_file.returncode == 2 and "is a file; load_model takes the checkpoint's folder" in a_file.stderr
    for bad, says in ((["--draft-lengths", "2", "0"], "draft_length must be an int >= 1"),
                      (["--batch-size", "0"], "--batch-size must be >= 1, got 0")):
        run = run_cli("demo", *bad)
        assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr
        assert "params" not in run.stdout  # refused before the pair is loaded (its sizes are printed then)
    target_dir, _ = zoo.demo_paths()
    too_long = run_cli("generate", "--target", str(target_dir), "--prompt", "x = 1\n" * 2000)
    assert too_long.returncode == 2 and "max_seq_len" in too_long.stderr


def test_training_fast_mode_and_mismatched_tokenizers(tmp_path):
    """The training script cannot rot: a few steps on a tiny corpus, end to end."""
    from minibass.zoo import train

    train.main(["--out", str(tmp_path), "--fast"])
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["acceptance"]) >= {"T=0,k=4", "T=1,k=4"}
    from transformers import AutoModelForCausalLM

    for name in ("target", "draft"):
        ours = minibass.load_model(tmp_path / name)
        theirs = AutoModelForCausalLM.from_pretrained(tmp_path / name, **hf_dtype(torch.float32)).eval()
        ids = torch.tensor([1, 2, 3, 4])
        with torch.no_grad():
            ref = theirs(ids[None]).logits[0]
        assert (ours(ids, torch.tensor([4]), ours.init_cache(1, 4), attention="naive") - ref).abs().max() <= FP32_TOL
    target_dir, _ = zoo.demo_paths()
    mismatch = run_cli("generate", "--target", str(target_dir), "--draft", str(tmp_path / "draft"), "--prompt", "x")
    assert mismatch.returncode == 2 and "tokenizers" in mismatch.stderr


@pytest.mark.parametrize("policy", [1, 3, "dynamic", "auto"])
def test_policy_replay_steps_like_the_loop(policy):
    """``bench policies`` replays greedy decoding on recorded agreement runs; it must take the same
    steps, draft lengths and acceptances as ``speculative_generate`` itself (float64, so that no
    near-tie of the two models' greedy tokens can differ between the two ways of computing them)."""
    from minibass.bench.policies import CallCosts, agreement_runs, replay
    from minibass.draft_length import CostAwareDraftLength, DraftCosts

    target, draft, tokenizer = zoo.load_demo_pair(dtype=torch.float64)
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in zoo.demo_prompts(3)]
    new_tokens, k_max = 14, 32

    def make():  # "auto" with fixed costs, so that both runs choose alike
        return CostAwareDraftLength(costs=DraftCosts(0.1, 1.0, 0.1)) if policy == "auto" else policy

    real = minibass.speculative_generate(target, draft, prompts, new_tokens, draft_length=make(),
                                         sampling=minibass.SamplingParams(temperature=0), attention="padded")
    runs = agreement_runs(target, draft, prompts, new_tokens, k_max)
    costs = CallCosts({b: {"regular": 1.0, "draft": 0.1, "verify5": 1.4} for b in (1, 3)})  # the same at 1..3
    replayed = replay(make(), runs, new_tokens, costs, k_max)
    assert replayed["steps"] == real.stats.steps
    assert replayed["draft_lengths"] == real.stats.draft_lengths
    assert replayed["accepted"] == real.stats.accepted
    # Priced per step: k draft calls and a verify of k + 1 tokens at the batch size of that step.
    steps = [(sum(n >= 0 for n in row), k) for row, k in zip(replayed["accepted"], replayed["draft_lengths"])]
    assert replayed["seconds"] == pytest.approx(sum(k * 0.1 + 1.0 + k * 0.1 for _, k in steps))
    assert costs.verify(3, 0) == costs.regular(3) == 1.0 and costs.verify(1, 4) == pytest.approx(1.4)


def test_auto_constants_script_scores_against_the_best_fixed_length(tmp_path, capsys):
    """scripts/auto_constants.py divides a policy's replayed speed-up by the best fixed k's: exactly 1 for
    the best fixed k itself, below 1 for a worse one; and it prints a row per (pull, memory, costs)."""
    from minibass.bench.policies import CallCosts, iid_runs

    script = load_script("auto_constants")
    runs, new_tokens, k_max = iid_runs(0.8, 16, 24, 16), 24, 16
    costs_ms = {"1": {"regular": 5.0, "draft": 0.5, "verify5": 6.0}, "16": {"regular": 8.0, "draft": 0.6, "verify5": 12.0}}
    costs = script["cost_models"](costs_ms)["measured"]
    assert isinstance(costs, CallCosts) and costs.verify(1, 4) == pytest.approx(6e-3)
    ratios = {k: script["relative_speed"](lambda k=k: k, runs, new_tokens, k_max, costs, 4) for k in script["FIXED"]}
    assert max(ratios.values()) == pytest.approx(1.0) and min(ratios.values()) < 0.95
    payload = {"provenance": {"date": "today"}, "runs": runs, "new_tokens": new_tokens, "k_max": k_max,
               "costs_ms": costs_ms}
    (tmp_path / "p.json").write_text(json.dumps(payload))
    script["main"](["--json", str(tmp_path / "p.json"), "--pulls", "2", "10", "--orders", "2"])
    out = capsys.readouterr().out
    assert out.count("verify slope x0.6") == 2 and "2 prompt sets" in out


def test_auto_vs_best_chooses_the_best_length_on_other_rounds_than_it_measures():
    """scripts/auto_vs_best.py: four rounds, regular 1 s each. k = 2 is fast on rounds 1 and 3, k = 3 on rounds 2
    and 4, `auto` in between: in hindsight the best k is whichever median is larger; held out, the k chosen on
    rounds 1 and 3 (k = 2) is measured on rounds 2 and 4, where it is slow, and the other way round."""
    script = load_script("auto_vs_best")
    seconds = {"regular": [1.0] * 4, "1": [1.0] * 4, "2": [0.5, 1.0, 0.5, 1.0], "3": [1.0, 0.4, 1.0, 0.4],
               "4": [2.0] * 4, "auto": [0.8] * 4}
    result = script["compare"](seconds)
    assert result["median_speedup"]["2"] == pytest.approx(1.5) and result["median_speedup"]["3"] == pytest.approx(1.75)
    assert result["hindsight"][0] == "3" and result["hindsight"][1] == pytest.approx(1.25 / 1.75)
    (k1, r1), (k2, r2) = result["held_out"]
    assert (k1, k2) == ("2", "3")
    assert r1 == pytest.approx(1.25 / 1.0) and r2 == pytest.approx(1.25 / 1.0)


def test_a_draft_can_start_as_the_target_cut_short_after_its_first_layers(tmp_path):
    """--draft-init target copies the target's embeddings, first layers and final norm, so the draft starts
    as the target's early exit: the same logits as the target's norm and head applied after layer 1. A
    draft of another width is refused; the CLI trains such a draft end to end."""
    from minibass.zoo import train

    torch.manual_seed(0)
    target = train.llama(300, *train.parse_shape("3x64"), 128, 0).eval()
    draft = train.llama(300, *train.parse_shape("1x64"), 128, 0).eval()
    x = torch.randint(0, 300, (2, 11))
    with torch.no_grad():
        before = draft(x).logits
        train.init_from_target(draft, target)
        after = draft(x).logits
        early = target(x, output_hidden_states=True).hidden_states[1]
        expected = target.lm_head(target.model.norm(early))
    assert not torch.allclose(before, expected, atol=1e-3)
    torch.testing.assert_close(after, expected)
    with pytest.raises(ValueError, match="hidden size"):
        train.init_from_target(train.llama(300, *train.parse_shape("1x32"), 128, 0), target)

    train.main(["--out", str(tmp_path / "pair"), "--fast", "--draft-init", "target"])
    assert minibass.load_model(tmp_path / "pair" / "draft").config.hidden_size == 64
    card = (tmp_path / "pair" / "draft" / "README.md").read_text()
    assert "`--draft-init target`" in card and "Llama: 1 layer, hidden 64" in card


def test_untying_a_drafts_head_keeps_its_function_and_frees_the_head(tmp_path):
    """untie_head gives a tied model a head of its own that starts as a copy of the embeddings: the same
    logits, one more matrix of parameters, and a gradient step moves the two apart. The CLI's --untie-head
    saves an untied draft that minibass loads, from --draft-from or from --draft-init target; a run
    resumed with the flag changed is refused instead of loading a head into the embeddings."""
    from minibass.zoo import train

    torch.manual_seed(0)
    model = train.llama(300, *train.parse_shape("1x32"), 128, 0)
    tied_params = sum(p.numel() for p in model.parameters())
    x = torch.randint(0, 300, (2, 9))
    with torch.no_grad():
        before = model(x).logits
    train.untie_head(model)
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == tied_params + 300 * 32
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, before)
    model(x).logits.sum().backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)

    a = tmp_path / "a"
    train.main(["--out", str(a), "--fast"])
    from_draft = ["--fast", "--target-from", str(a / "target"), "--draft-from", str(a / "draft"), "--untie-head"]
    train.main(["--out", str(tmp_path / "b"), *from_draft])
    draft = minibass.load_model(tmp_path / "b" / "draft")
    assert not draft.config.tie_word_embeddings and draft.lm_head.weight is not draft.model.embed_tokens.weight
    assert "untied output head" in (tmp_path / "b" / "draft" / "README.md").read_text()
    assert "tied embeddings" in (a / "draft" / "README.md").read_text()

    train.main(["--out", str(tmp_path / "c"), "--fast", "--draft-init", "target", "--untie-head"])
    assert not minibass.load_model(tmp_path / "c" / "draft").config.tie_word_embeddings

    train.main(["--out", str(tmp_path / "d"), *from_draft, "--max-minutes", "0"])  # stops after one step
    with pytest.raises(SystemExit):  # the run's options are checked first
        train.main(["--out", str(tmp_path / "d"), *from_draft[:-1], "--resume"])
    with pytest.raises(ValueError, match="resume with the flags of the run that wrote it"):  # and the checkpoint
        train.fit(train.llama(300, *train.parse_shape("1x32"), 128, 0), 3, None, torch.Generator(), 1e-3, None,
                  "draft", tmp_path / "d" / "_work" / "draft.pt", None)


def test_pair_acceptance_script_measures_drafts_against_the_target(tmp_path):
    """scripts/pair_acceptance.py: the target as its own draft is always accepted, greedy and sampled; a
    trained draft is not; temperature 1 runs once per seed, greedy once; and the call cost is recorded
    per round for each draft, with the command that measured it."""
    from minibass.zoo import train

    a = tmp_path / "a"
    train.main(["--out", str(a), "--fast"])
    script = load_script("pair_acceptance")
    out = tmp_path / "acceptance.json"
    script["main"](["--target", str(a / "target"), "--draft", str(a / "target"), str(a / "draft"),
                    "--seeds", "2", "--rounds", "3", "--batch", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    itself, draft = (result["drafts"][str(d)] for d in (a / "target", a / "draft"))
    assert result["prompts"] == 32 and len(itself["acceptance"]) == 6 and "--seeds 2" in result["command"]
    assert all(cell["mean"] == 1.0 for cell in itself["acceptance"].values())
    assert len(draft["acceptance"]["T=1,k=4"]["runs"]) == 2 and len(draft["acceptance"]["T=0,k=4"]["runs"]) == 1
    assert all(cell["mean"] < 1.0 for cell in draft["acceptance"].values())
    assert len(draft["draft_call_over_target_step"]["rounds"]) == 3
    assert draft["parameters"] < itself["parameters"]


def test_the_reading_warns_of_a_stalled_round_and_of_probes_rising_with_the_batch():
    from minibass.__main__ import _reading

    def row(regular_ms):  # k = 3, 20 steps: verify 1.3, drafts 0.3, host 0.1 regular steps each
        return {"policy": "3", "paired_regular_ms": regular_ms, "steps": 20, "target_ms": 26 * regular_ms,
                "draft_ms": 6 * regular_ms, "host_ms": 2 * regular_ms, "paired_regular_steps": 48,
                "mean_accepted": 1.6, "draft_calls": 60, "speedup": 2.4 / 1.7, "batches": 1}

    falling = {1: {"regular": 5.0, "verify": 6.0, "draft": 0.4}, 8: {"regular": 10.0, "verify": 16.0, "draft": 0.9}}
    quiet = _reading([row(11.0)], falling, 8, 3)
    assert quiet.startswith("Reading:") and "machine was busy" not in quiet
    stalled = _reading([row(35.0)], falling, 8, 3)
    assert stalled.startswith("Caution: in the round read below, a regular step took 35.00 ms, 3.5 times the 10.00 ms")
    busy_probe = _reading([row(4.0)], falling, 8, 3)
    assert busy_probe.startswith("Caution: the probe above timed a regular step at 10.00 ms, 2.5 times the 4.00 ms")
    rising = {**falling, 16: {"regular": 12.0, "verify": 13.0, "draft": 0.5}}  # cheaper verify at 16: a busy probe
    assert "the machine may have been busy while it was timed" in _reading([row(11.0)], rising, 8, 3)
    slightly = {**falling, 16: {"regular": 10.0, "verify": 15.5, "draft": 0.85}}  # a few percent up: no note
    assert "busy" not in _reading([row(11.0)], slightly, 8, 3)


@pytest.mark.parametrize("biases", [False, True])
def test_grow_draft_adds_a_layer_that_changes_nothing_until_trained(tmp_path, biases):
    """scripts/grow_draft.py: the deeper draft has one more layer, minibass and transformers load it, and its
    logits are the draft's own; a nonzero output projection in the new layer (what training does) changes them."""
    from conftest import hf_tiny

    model = hf_tiny("llama", seed=3, attention_bias=biases, mlp_bias=biases)
    with torch.no_grad():  # (biases start at zero)
        for name, parameter in model.named_parameters():
            if name.endswith(".bias"):
                parameter.normal_(0, 0.1)
    model.save_pretrained(tmp_path / "draft")
    script = load_script("grow_draft")
    script["main"](["--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "grown")])
    small = minibass.load_model(tmp_path / "draft", dtype=torch.float64)
    grown = minibass.load_model(tmp_path / "grown", dtype=torch.float64)
    assert len(grown.model.layers) == len(small.model.layers) + 1

    def logits(model):
        tokens = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
        return model(tokens, torch.tensor([len(tokens)]), model.init_cache(1, 16), attention="naive")

    torch.testing.assert_close(logits(grown), logits(small), rtol=0, atol=1e-12)
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "grown", dtype=torch.float64)
    torch.testing.assert_close(hf(torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])).logits[0], logits(small), rtol=0,
                               atol=FP32_TOL)  # (transformers keeps its rotary tables in float32)
    with torch.no_grad():
        grown.model.layers[-1].mlp.down_proj.weight.normal_()
    assert (logits(grown) - logits(small)).abs().max() > 1e-3
