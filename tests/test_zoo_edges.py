"""The demo pair's package code and the training script at their edges: the train / held-out split, the demo's
batches, the learning-rate schedule, checkpoints, the distillation loss against its formula, the held-out metric,
--fast against options given, and the provenance a card and metrics.json record."""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import minibass
from minibass import zoo
from minibass.zoo import train

DEMO_TARGET = Path(zoo.__file__).parent / "demo" / "target"


def held_by_rule(relative: str) -> bool:
    """The split's rule, written out again: a file is held out when the SHA-256 of its path under the stdlib is 0
    modulo 20."""
    return int(hashlib.sha256(relative.encode()).hexdigest(), 16) % 20 == 0


@pytest.fixture(scope="module")
def tokenizer():
    return minibass.load_tokenizer(DEMO_TARGET)


class Stop(Exception):
    """Raised from a stand-in for ``fit`` once it has what a test needs: no training."""


# ---------------------------------------------------------------- the corpus and its split
def test_the_split_holds_out_files_by_their_path_hash_and_never_trains_on_them():
    train_files, held, root = train.corpus_files()

    def names(files):
        return [p.relative_to(root).as_posix() for p in files]

    assert held and not set(train_files) & set(held)
    assert all(held_by_rule(n) for n in names(held)) and not any(held_by_rule(n) for n in names(train_files))
    assert 0.02 < len(held) / (len(held) + len(train_files)) < 0.10  # ~5%
    assert not any(train.SKIP_DIRS & set(Path(n).parts) for n in names(train_files) + names(held))  # no test suites
    assert names(train_files) == sorted(names(train_files))
    # Every stdlib source outside the skipped folders is in one of the two.
    everything = {p for p in root.rglob("*.py") if not train.SKIP_DIRS & set(p.relative_to(root).parts)}
    assert set(train_files) | set(held) == everything
    # --fast: that many files in all, the first held-out file among them, none of them trained on.
    small_train, small_held, _ = train.corpus_files(limit=12)
    assert len(small_train) + len(small_held) == 12 and small_held == held[:1]
    assert small_train == train_files[:11] and not set(small_train) & set(held)


def test_the_stream_puts_end_of_text_after_every_file(tokenizer):
    texts = ["a = 1\n", "def f():\n    pass\n"]
    stream = train.encode_all(tokenizer, texts).tolist()
    eos = tokenizer.eos_token_id
    first, second = (tokenizer.encode(t, add_special_tokens=False) for t in texts)
    assert stream == first + [eos] + second + [eos]


def test_mixed_batches_draw_every_written_row_and_keep_the_halves():
    stream = torch.zeros(200, dtype=torch.long)
    written = torch.arange(1, 4)[:, None].expand(3, 9).clone()  # rows 1, 2, 3
    data = train.mixed_batches(stream, written, 4, 8, torch.Generator().manual_seed(0))
    seen = set()
    for _ in range(30):
        batch = next(data)
        assert batch.shape == (4, 9) and batch[:2].sum() == 0  # two windows of the stream, then two written rows
        seen |= set(batch[2:, 0].tolist())
    assert seen == {1, 2, 3}


# ---------------------------------------------------------------- the demo's prompts and batches
def test_demo_paths_are_target_then_draft_and_a_missing_draft_is_said(tmp_path, monkeypatch):
    target, draft = zoo.demo_paths()
    assert (target.name, draft.name) == ("target", "draft")
    assert json.loads((target / "config.json").read_text())["num_hidden_layers"] > \
        json.loads((draft / "config.json").read_text())["num_hidden_layers"]
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    monkeypatch.setattr(zoo, "DEMO", tmp_path)
    with pytest.raises(FileNotFoundError, match="missing at .*draft"):
        zoo.demo_paths()


def test_load_demo_pair_gives_both_models_the_dtype_asked():
    target, draft, tokenizer = zoo.load_demo_pair(dtype=torch.float64)
    assert {p.dtype for p in target.parameters()} == {p.dtype for p in draft.parameters()} == {torch.float64}
    assert tokenizer.eos_token_id is not None


def test_demo_prompts_are_the_shipped_ones_in_order():
    shipped = [p["text"] for p in json.loads((zoo.DEMO / "prompts.json").read_text())["prompts"]]
    assert zoo.demo_prompts(3) == shipped[:3] and zoo.demo_prompts() == shipped[:8]
    assert zoo.demo_prompts(1000) == shipped


@pytest.mark.parametrize("batch, n", [(2, 3), (3, 8), (1, 8), (4, 4), (32, 8), (5, 40)])
def test_demo_batches_are_whole_equal_batches_that_repeat_prompts_only_when_too_few(tokenizer, batch, n):
    shipped = zoo.demo_prompts(1000)
    count = math.ceil(max(n, batch) / batch) * batch
    groups = zoo.demo_batches(tokenizer, batch, n)
    assert len(groups) == count // batch and all(len(group) == batch for group in groups)
    flat = [p for group in groups for p in group]
    expected = [tokenizer.encode(shipped[i % len(shipped)], add_special_tokens=False) for i in range(count)]
    assert flat == expected  # the shipped prompts in order, distinct until they run out, then again from the first


# ---------------------------------------------------------------- schedule, checkpoints
def test_the_learning_rate_warms_up_linearly_then_falls_as_a_cosine():
    peak, total, warmup = 2.0, 105, 5
    lrs = [train.lr_at(step, total, peak, warmup) for step in range(total)]
    assert lrs[:warmup] == pytest.approx([0.4, 0.8, 1.2, 1.6, 2.0])  # never zero at the first step
    assert lrs[warmup] == pytest.approx(peak)
    assert lrs[warmup + 50] == pytest.approx(peak / 2)  # halfway down the cosine
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))
    assert 0 < lrs[-1] < 0.001 * peak


def test_a_resumed_fit_adds_its_time_to_the_time_already_spent(tmp_path):
    """The card's minutes are those of all parts: the checkpoint's seconds carry over into the next save."""
    torch.manual_seed(0)
    model = train.llama(300, *train.parse_shape("1x32"), 64, 0)
    data = iter(lambda: torch.randint(0, 300, (2, 9)), None)
    loss = lambda x: model(x[:, :-1]).logits.logsumexp(-1).mean()  # noqa: E731
    checkpoint = tmp_path / "draft.pt"
    assert not train.fit(model, 3, data, torch.Generator(), 1e-3, loss, "draft", checkpoint, deadline=0.0)
    state = torch.load(checkpoint, weights_only=True)
    assert state["step"] == 1
    state["seconds"] = 600.0  # as if the first part had run ten minutes
    torch.save(state, checkpoint)
    assert train.fit(model, 3, data, torch.Generator(), 1e-3, loss, "draft", checkpoint, deadline=None)
    assert torch.load(checkpoint, weights_only=True)["step"] == 3 and train.minutes_spent(checkpoint) >= 10.0


def test_a_checkpoint_killed_while_being_written_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    path = tmp_path / "target.pt"
    train.save_atomically({"step": 50}, path)
    real_save = torch.save

    def killed(state, file):  # half a file, then the disk is full
        Path(file).write_bytes(b"PK\x03\x04 half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(OSError, match="No space"):
        train.save_atomically({"step": 100}, path)
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.load(path, weights_only=True) == {"step": 50}


# ---------------------------------------------------------------- the losses against their formulas
def stop_at_fit(monkeypatch, desc: str) -> dict:
    """Replaces ``train.fit``: the fit named ``desc`` records its model, data and loss, then stops the run."""
    seen = {}

    def fit(model, steps, data, generator, lr, loss_fn, name, checkpoint, deadline, monitor=None):
        if name != desc:
            return True
        seen.update(model=model, data=data, loss=loss_fn, steps=steps, lr=lr)
        raise Stop

    monkeypatch.setattr(train, "fit", fit)
    return seen


@pytest.mark.parametrize("loss", ["kl", "tv"])
def test_the_draft_is_distilled_on_kl_from_the_target_or_on_the_total_variation(tmp_path, monkeypatch, loss):
    """The draft's loss on a batch is KL(target || draft) over the next-token distributions at temperature 1,
    averaged over positions, or the total-variation distance 1/2 sum |p - q|; the kept target's own logits."""
    seen = stop_at_fit(monkeypatch, "draft")
    with pytest.raises(Stop):
        train.main(["--out", str(tmp_path / "run"), "--fast", "--target-from", str(DEMO_TARGET), "--draft-loss", loss])
    target, _ = train.pretrained(DEMO_TARGET)
    draft, x = seen["model"], next(seen["data"])
    with torch.no_grad():
        p = torch.log_softmax(target.eval()(x[:, :-1]).logits.float(), -1)
        q = torch.log_softmax(draft(x[:, :-1]).logits.float(), -1)
        got = seen["loss"](x)
    forward = (p.exp() * (p - q)).sum(-1).mean()  # KL(target || draft), per position
    backward = (q.exp() * (q - p)).sum(-1).mean()
    assert not torch.isclose(forward, backward, rtol=1e-3)  # the batch tells the two directions apart
    expected = forward if loss == "kl" else 0.5 * (p.exp() - q.exp()).abs().sum(-1).mean()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_target_learns_the_next_token_of_windows_drawn_with_the_runs_seed(tmp_path, monkeypatch):
    seen = stop_at_fit(monkeypatch, "target")
    with pytest.raises(Stop):
        train.main(["--out", str(tmp_path / "run"), "--fast", "--seed", "5"])
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path / "run" / "_work")
    train_files, _, _ = train.corpus_files(limit=12)
    stream = train.encode_all(tokenizer, train.read(train_files))
    starts = torch.randint(0, len(stream) - 32 - 1, (2,), generator=torch.Generator().manual_seed(5)).tolist()
    x = next(seen["data"])
    assert x.tolist() == [stream[s:s + 33].tolist() for s in starts]  # --fast: batch 2, 32 tokens and the next
    model = seen["model"]
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(x[:, :-1]).logits.flatten(0, 1), x[:, 1:].flatten())
        torch.testing.assert_close(seen["loss"](x), expected)


class TableModel(torch.nn.Module):
    """logits = a table row per input token; called the way held_out_loss calls a model."""

    def __init__(self, vocab: int):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)
        self.inputs = []

    def forward(self, x):
        self.inputs.append(x)
        return SimpleNamespace(logits=self.table(x))


@pytest.mark.parametrize("length, max_windows", [(8 * 10 + 1, 4), (8 * 10, 64), (8 * 10 + 5, 64)])
def test_the_held_out_loss_reads_whole_consecutive_windows_of_the_stream(length, max_windows):
    torch.manual_seed(0)
    stream, model = torch.randint(0, 13, (length,)), TableModel(13)
    n = min(max_windows, (length - 1) // 8)
    assert train.held_out_windows(stream, 8, max_windows) == n
    with torch.no_grad():
        expected = sum(torch.nn.functional.cross_entropy(model.table(stream[i * 8:(i + 1) * 8]),
                                                         stream[i * 8 + 1:(i + 1) * 8 + 1]).item()
                       for i in range(n)) / n
    model.inputs.clear()
    assert train.held_out_loss(model, stream, 8, max_windows) == pytest.approx(expected, rel=1e-6)
    assert [x.tolist() for x in model.inputs] == [[stream[i * 8:(i + 1) * 8].tolist()] for i in range(n)]


# ---------------------------------------------------------------- prompts written with the pair
def test_demo_prompts_are_the_first_whole_def_line_of_each_file_and_its_next_line(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\ndef f(a,\n      b):\n    return a\n\ndef g():\n    pass\n")
    (tmp_path / "b.py").write_text("class C:\n    def m(self):\n        return 1\n")
    (tmp_path / "c.py").write_text("y = 2\n")  # no function: no prompt
    out = tmp_path / "prompts.json"
    train.write_demo_prompts([tmp_path / "pkg" / "a.py", tmp_path / "b.py", tmp_path / "c.py"], tmp_path, out)
    prompts = json.loads(out.read_text())["prompts"]
    assert prompts == [{"file": "pkg/a.py", "line": 6, "text": "def g():\n    pass\n"},
                       {"file": "b.py", "line": 2, "text": "    def m(self):\n        return 1\n"}]


def test_held_out_prompts_are_the_first_n_of_exactly_the_length_asked(tokenizer):
    texts = ["x = 1\n", "def a(x):\n    return x + 1\n\ndef b(y):\n    return y * 2\n",
             "def c():\n    pass\n\ndef d(z, w):\n    return z - w\n"]
    sources = []
    prompts = train.held_out_prompts(tokenizer, texts, 3, 4, sources)
    assert len(prompts) == 3 and all(len(p) == 4 for p in prompts) and sources == [1, 1, 2]
    assert prompts[0] == tokenizer.encode("def a(x):\n    return x + 1\n\ndef b(y):\n    return y * 2",
                                          add_special_tokens=False)[:4]


# ---------------------------------------------------------------- a whole run in two parts, and what it records
FAST = ["--fast", "--batch", "3", "--seq-len", "40", "--vocab", "320", "--target-lr", "0.004", "--draft-lr", "0.006",
        "--draft-steps", "2"]


@pytest.fixture(scope="module")
def two_part_run(tmp_path_factory):
    """A --fast run with options of its own, stopped after one step, started afresh and stopped again, a resume
    that changes the seed (refused), then the resume that finishes it; the streams the held-out loss read."""
    out = tmp_path_factory.mktemp("two-part") / "run"
    record = {"held_out_loss": [], "refused": None}
    real = train.held_out_loss
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "held_out_loss", lambda model, stream, *a, **k: record["held_out_loss"].append(
            stream.clone()) or real(model, stream, *a, **k))
        train.main(["--out", str(out), *FAST, "--seed", "7", "--max-minutes", "0"])
        train.main(["--out", str(out), *FAST, "--max-minutes", "0"])  # a fresh run: the first one's checkpoint goes
        record["fresh_step"] = torch.load(out / "_work" / "target.pt", weights_only=True)["step"]
        try:
            train.main(["--out", str(out), *FAST, "--seed", "1", "--resume"])
        except SystemExit as exit_status:
            record["refused"] = exit_status.code
        work = out / "_work"  # (gone if that resume was let through and finished the run)
        record["after_refusal"] = torch.load(work / "target.pt", weights_only=True)["step"] if work.exists() else None
        record["argv"] = ["--out", str(out), *FAST, "--resume"]
        if record["refused"] is not None:
            train.main(record["argv"])
    return out, record


def test_a_fresh_run_starts_again_and_a_resume_may_not_change_the_seed(two_part_run):
    _, record = two_part_run
    assert record["fresh_step"] == 1  # one step of its own, not a second step on the stopped run's checkpoint
    assert record["refused"] == 2 and record["after_refusal"] == 1


def test_fast_sets_defaults_and_the_options_given_win(two_part_run):
    out, _ = two_part_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["batch"], metrics["seq_len"], metrics["vocab"], metrics["seed"]) == (3, 40, 320, 0)
    assert metrics["lr"] == {"target": 0.004, "draft": 0.006}
    cards = {name: (out / name / "README.md").read_text() for name in ("target", "draft")}
    training = "| training | {} steps, batch 3 x 40 tokens, AdamW, cosine schedule, peak lr {}, seed 0,"
    assert training.format(4, 0.004) in cards["target"] and training.format(2, 0.006) in cards["draft"]
    assert "Llama: 2 layers, hidden 64," in cards["target"] and "Llama: 1 layer, hidden 32," in cards["draft"]
    assert minibass.load_model(out / "draft").config.vocab_size == 320


def test_the_held_out_metric_reads_the_held_out_files_only(two_part_run):
    out, record = two_part_run
    tokenizer = minibass.load_tokenizer(out / "target")
    train_files, held_files, _ = train.corpus_files(limit=12)
    held = train.encode_all(tokenizer, train.read(held_files))
    assert len(record["held_out_loss"]) == 2 and all(torch.equal(s, held) for s in record["held_out_loss"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["n_train"], metrics["n_held"]) == (11, 1)
    assert metrics["held_tokens"] == len(held)
    assert metrics["train_tokens"] == len(train.encode_all(tokenizer, train.read(train_files)))
    assert all(math.isfinite(v) for v in metrics["held_out_loss"].values())
    for name in ("target", "draft"):
        card = (out / name / "README.md").read_text()
        assert f"| held-out loss | {metrics['held_out_loss'][name]:.3f} nats/token" in card
        assert f"1 held-out file ({len(held):,} tokens)" in card
        assert f"over the first {train.held_out_windows(held, 40) * 40:,} tokens" in card


def test_the_prompts_written_with_the_pair_come_from_held_out_files(two_part_run):
    out, _ = two_part_run
    _, held_files, root = train.corpus_files(limit=12)
    prompts = json.loads((out / "prompts.json").read_text())["prompts"]
    assert [p["file"] for p in prompts] == [p.relative_to(root).as_posix() for p in held_files]
    for prompt in prompts:
        assert held_by_rule(prompt["file"])
        lines = (root / prompt["file"]).read_text().splitlines()
        assert prompt["text"] == "\n".join(lines[prompt["line"] - 1:prompt["line"] + 1]) + "\n"
        assert lines[prompt["line"] - 1].lstrip().startswith("def ")
    card = (out / "draft" / "README.md").read_text()
    assert "(2 prompts of 8 tokens from 1 held-out file, 8 new tokens, seed 0, the saved bfloat16 weights)" in card


def test_metrics_name_the_part_that_finished_the_run(two_part_run):
    out, record = two_part_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["argv"] == shlex.join(record["argv"])
    assert [p["command"].split()[-1] for p in metrics["parts"]] == ["0", "--resume"]
    assert "target_from" not in metrics


def test_a_kept_targets_provenance_is_its_own_run(tmp_path):
    """--target-from: the target's lr and minutes in metrics.json are those its own run recorded, not this run's
    options; metrics name the folder it came from; its weights and card are kept but for the pair's acceptance.
    The draft's card counts its one step in the singular."""
    out = tmp_path / "run"
    train.main(["--out", str(out), "--fast", "--target-from", str(DEMO_TARGET), "--target-lr", "0.009",
                "--draft-lr", "0.006", "--draft-steps", "1"])
    kept = json.loads((DEMO_TARGET.parent / "metrics.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["target_from"] == str(DEMO_TARGET)
    assert metrics["lr"] == {"target": kept["lr"]["target"], "draft": 0.006}
    assert metrics["minutes"]["target"] == kept["minutes"]["target"]
    assert (out / "target" / "model.safetensors").read_bytes() == (DEMO_TARGET / "model.safetensors").read_bytes()
    row = "| acceptance (this pair, held-out prompts, minibass `speculative_generate`) | "
    ours, theirs = ((d / "README.md").read_text().splitlines() for d in (out / "target", DEMO_TARGET))
    assert [line for line in ours if not line.startswith(row)] == [line for line in theirs if not line.startswith(row)]
    assert f"T=1,k=4: {metrics['acceptance']['T=1,k=4']}" in next(line for line in ours if line.startswith(row))
    draft_card = (out / "draft" / "README.md").read_text()
    assert "peak lr 0.006" in draft_card and "| training | 1 step," in draft_card


@pytest.mark.parametrize("options, says", [(["--vocab", "256"], "--vocab must be >= 257"),
                                           (["--draft-lr", "0"], "--draft-lr must be > 0"),
                                           (["--seq-len", "1"], "--seq-len must be in [2, 1024]"),
                                           (["--on-policy", "-1"], "--on-policy must be >= 0"),
                                           (["--draft-shape", "\u00b2x192"], "a shape is LAYERSxHIDDEN")])
def test_more_bad_training_options_are_refused_before_any_work(tmp_path, capsys, options, says):
    with pytest.raises(SystemExit) as exit_status:
        train.main(["--out", str(tmp_path / "run"), "--fast", *options])
    assert exit_status.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
