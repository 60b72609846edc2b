"""models, data, checks, env, timing and plots: small, but the labs lean on every one; and the
lab packages' lazy loading, which keeps plotting out of every rank."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest
import torch

import lab_utils.labs
from lab_utils import checks, data, env, models, plots, timing
from tests.helpers.grading import graded_fail


def test_mlp_shape_and_determinism():
    a, b = models.mlp(width=16, depth=3, in_dim=4, out_dim=2, seed=1), models.mlp(16, 3, in_dim=4, out_dim=2, seed=1)
    x = torch.randn(5, 4)
    assert a(x).shape == (5, 2) and torch.equal(a(x), b(x))
    assert sum(p.numel() for p in a.parameters()) == 4 * 16 + 16 + 3 * (16 * 16 + 16) + 16 * 2 + 2
    with pytest.raises(ValueError, match="depth"):
        models.mlp(width=4, depth=0)


def test_transformer_block_is_causal():
    chain = models.transformer_chain(n_blocks=2, d_model=16, n_heads=2, seed=0)
    x = torch.randn(1, 6, 16)
    y = chain(x)
    x2 = x.clone()
    x2[:, -1] += 1.0  # change only the last position
    assert torch.allclose(chain(x2)[:, :-1], y[:, :-1], atol=1e-6)
    with pytest.raises(ValueError, match="divisible"):
        models.TransformerBlock(d_model=10, n_heads=3)


def test_tiny_hf_models_build_offline():
    lm = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2)
    batch = data.lm_batch(n=3, max_len=10)
    out = lm(**batch)
    assert out.logits.shape == (3, 10, 128) and out.loss.item() > 0
    clf = models.tiny_classifier(num_labels=2, n_layer=1, n_embd=32, n_head=2)
    ids, mask, labels = data.token_classification(n=4, max_len=10)
    assert clf(input_ids=ids, attention_mask=mask).logits.shape == (4, 2)


def test_tiny_hf_models_train_without_a_word(capfd):
    """No transformers notes (token ids outside the vocabulary, an unset loss type): nbval
    compares stderr, so a model that logs would make every lab cell that builds one fail."""
    lm = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2, seed=3)
    lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    lm(**data.lm_batch(n=2, max_len=8), num_items_in_batch=9).loss.backward()
    clf = models.tiny_classifier(n_layer=1, n_embd=32, n_head=2, seed=3)
    ids, mask, labels = data.token_classification(n=2, max_len=8)
    clf(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    assert capfd.readouterr().err == ""


def test_datasets_are_seeded_and_learnable():
    x1, y1 = data.regression(n=32, dim=4, seed=3)
    x2, y2 = data.regression(n=32, dim=4, seed=3)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, data.regression(n=32, dim=4, seed=4)[0])
    x, y = data.classification(n=2000, dim=8, seed=0)
    # Nearest class mean already classifies well above chance: the signal is learnable.
    means = torch.stack([x[y == c].mean(0) for c in (0, 1)])
    pred = torch.cdist(x, means).argmin(1)
    assert (pred == y).float().mean() > 0.75


def test_token_classification_labels_follow_the_rule():
    ids, mask, labels = data.token_classification(n=64, vocab_size=20, min_len=3, max_len=9, seed=0)
    lengths = mask.sum(1)
    assert lengths.min() >= 3 and lengths.max() <= 9
    assert torch.all(ids[mask == 0] == 0)
    for i in range(64):
        toks = ids[i, : lengths[i]]
        assert labels[i].item() == int(2 * (toks >= 10).sum().item() > lengths[i].item())
    b = data.lm_batch(n=4, max_len=9, seed=1)
    assert torch.all((b["labels"] == -100) == (b["attention_mask"] == 0))


def test_batches_cover_the_data_once():
    x = torch.arange(10)
    got = torch.cat([b[0] for b in data.batches(x, batch_size=4, shuffle=True, seed=0)])
    assert sorted(got.tolist()) == list(range(10))
    assert [len(b[0]) for b in data.batches(x, batch_size=4, drop_last=True)] == [4, 4]


def test_micro_batches_deal_the_batch_round_robin():
    x = torch.arange(24)[:, None]
    mine = {r: data.micro_batches(x, -x, k=3, rank=r, world_size=2) for r in range(2)}
    # micro-batch j of the 6 (4 samples each) goes to rank j % 2 as its micro-step j // 2
    assert [xb[0, 0].item() for xb, _ in mine[0]] == [0, 8, 16]
    assert [xb[0, 0].item() for xb, _ in mine[1]] == [4, 12, 20]
    assert all(torch.equal(yb, -xb) for r in mine for xb, yb in mine[r])
    step_1 = torch.cat([mine[r][1][0] for r in range(2)])  # one micro-step of all ranks: contiguous
    assert step_1.flatten().tolist() == list(range(8, 16))
    assert torch.equal(torch.cat([xb for xb, _ in data.micro_batches(x, x, k=4)]), x)  # one process: in order
    with pytest.raises(ValueError, match="world_size \\* k = 5"):
        data.micro_batches(x, x, k=5)
    with pytest.raises(ValueError, match="rank=2"):
        data.micro_batches(x, x, k=3, rank=2, world_size=2)
    with pytest.raises(ValueError, match="aligned"):
        data.micro_batches(x, x[:12], k=2)


def test_a_dict_batch_is_cut_by_the_same_rule():
    from lab_utils.memory.step import stepper

    batch = {"input_ids": torch.arange(12)[:, None], "labels": -torch.arange(12)[:, None]}
    micro, _, _ = stepper(torch.nn.Identity(), batch, torch.optim.SGD([torch.zeros(1)], lr=0.1), accumulation=3)
    rule = data.micro_batches(batch["input_ids"], batch["labels"], k=3)
    assert len(micro) == 3 and all(
        torch.equal(mb["input_ids"], x) and torch.equal(mb["labels"], y) for mb, (x, y) in zip(micro, rule)
    )
    assert micro[1]["input_ids"].data_ptr() == batch["input_ids"][4].data_ptr()  # a view, not a copy


def test_cmp_and_check(capsys):
    a = torch.ones(3)
    assert checks.cmp("same", a, a.clone()) == "exact"
    assert checks.cmp("near", a, a + 1e-7) == "close"
    assert checks.cmp("far", a, a + 1) == "DIFFERENT"
    assert checks.cmp("mid", a, a + 1e-4) == "DIFFERENT"  # beyond the default atol of 1e-6
    assert checks.cmp("mid", a, a + 1e-4, atol=1e-3) == "close"  # the caller's atol decides
    assert checks.cmp("shape", a, torch.ones(4)) == "DIFFERENT"
    capsys.readouterr()
    checks.check(True, "it holds", claim="holds")
    assert capsys.readouterr().out == "✓ it holds  [holds]\n"
    with pytest.raises(AssertionError, match=r"✗ it holds  \[holds\]\n  hint: look here"):
        checks.check(False, "it holds", claim="holds", hint="look here")
    for bad in ({}, {"claim": ""}, {"claim": None}):  # every ✓ names a ledger claim
        with pytest.raises(TypeError):
            checks.check(True, "it holds", **bad)
    m1, m2 = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    m2.load_state_dict(m1.state_dict())
    assert checks.param_max_diff(m1, m2) == 0
    with torch.no_grad():
        m2.weight[0, 0] += 0.5
    assert checks.param_max_diff(m1, m2) == pytest.approx(0.5)


def test_lab_size(monkeypatch):
    monkeypatch.delenv("LAB_SIZE", raising=False)
    assert env.pick(student=64, smoke=8) == 64
    monkeypatch.setenv("LAB_SIZE", "smoke")
    assert env.pick(student=64, smoke=8) == 8
    monkeypatch.setenv("LAB_SIZE", "huge")
    with pytest.raises(ValueError, match="LAB_SIZE='huge'"):
        env.lab_size()


def test_time_fn_warms_up_and_repeats():
    calls = []
    stats = timing.time_fn(lambda: calls.append(1), warmup=2, repeat=3)
    assert len(calls) == 5 and len(stats.samples) == 3 and stats.min <= stats.median
    assert timing.throughput(100, 2.0) == 50.0
    with pytest.raises(ValueError):
        timing.time_fn(lambda: None, repeat=0)


def test_plots_return_figures_with_the_data():
    fig = plots.bars({"a": 1, "b": 3}, title="t", yaxis="n")
    assert list(fig.data[0].y) == [1, 3] and fig.layout.title.text == "t"
    fig = plots.lines({"x": [1, 2, 3], "y": [3, 2, 1]}, xaxis="step", log_y=True)
    assert len(fig.data) == 2 and fig.layout.yaxis.type == "log"
    assert "modelled" in plots.modelled("time per update")
    fig = plots.anatomy_bars({"measured": {"weights": 2.0, "activations": 1.0}, "predicted": {"weights": 2.0}})
    assert [t.name for t in fig.data] == ["weights", "activations"] and list(fig.data[1].y) == [1.0, 0]


def test_grader_prints_each_mark_and_never_stops_run_all(capsys):
    @checks.grader("sum", "a sum", hint="is it a mean instead of a sum?")
    def check_sum(fn):
        got = fn([1.0, 2.0, 3.0])
        assert got == 6.0, f"your function returned {got}, expected 6.0"

    def stub(xs):
        raise NotImplementedError()

    assert check_sum(stub) == checks.NOT_ATTEMPTED
    assert check_sum(...) == checks.NOT_ATTEMPTED
    assert check_sum(sum) == checks.PASSED
    assert "✓ a sum" in capsys.readouterr().out and check_sum.exercise == "sum"
    # a wrong answer and an answer that raises: a ✗ line with the measurement and the hint, no raise
    text = graded_fail(check_sum, lambda xs: sum(xs) / len(xs), match="returned 2.0, expected 6.0")
    assert "is it a mean instead of a sum?" in text
    graded_fail(check_sum, lambda xs: xs.sum(), match="your code raised AttributeError")


def test_a_grader_s_todo_keeps_the_answer_out_of_the_not_attempted_line(capsys):
    @checks.grader("sum", "a sum", hint="sum() adds them", todo="reread section 1")
    def check_sum(fn):
        assert fn([1.0, 2.0]) == 3.0, "not the sum"

    assert check_sum(...) == checks.NOT_ATTEMPTED
    out = capsys.readouterr().out
    assert "reread section 1" in out and "sum() adds them" not in out
    assert "sum() adds them" in graded_fail(check_sum, lambda xs: 0.0, match="not the sum")


def test_a_rank_s_error_is_shown_by_its_last_lines_not_the_launcher_s_frames():
    from lab_utils.launcher.errors import RankError

    frames = "".join(f'  File "launcher{i}.py", line {i}\n    step()\n' for i in range(12))
    tail = '  File "<cell>", line 3\n    x[9]\nIndexError: out of range\n'
    tb = "Traceback (most recent call last):\n" + frames + tail

    @checks.grader("idx", "an index", hint="count from 0")
    def check_idx(fn):
        fn()

    def student():
        raise RankError(1, "IndexError", "out of range", tb)

    text = graded_fail(check_idx, student, match="rank 1 raised IndexError: out of range")
    assert '<cell>", line 3' in text and "x[9]" in text and "launcher3.py" not in text


TOPICS = sorted(m.name for m in pkgutil.iter_modules(lab_utils.labs.__path__) if m.ispkg)
DRAWING = {"figures", "calculator"}  # the modules that draw (plotly) or hold widgets (ipywidgets)


@pytest.mark.slow  # a fresh interpreter per package
def test_lab_packages_load_lazily_and_their_rank_side_imports_no_plotting():
    """A rank imports a lab's package and the modules it runs, never the figures: each package loads
    its modules on first use, so no rank pays for plotly and ipywidgets at start-up. One fresh
    interpreter imports the lab packages one by one and names the first module that pulls plotting in;
    then ``tools.solutions`` (which no lab_utils module imports), which must not load nbformat."""
    steps = []
    for topic in TOPICS:
        package = importlib.import_module(f"lab_utils.labs.{topic}")
        steps.append([package.__name__])
        steps.append(
            [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.name not in DRAWING]
        )
    code = (
        "import importlib, sys\n"
        f"for names in {steps!r}:\n"
        "    for name in names:\n"
        "        importlib.import_module(name)\n"
        "        if any(k in sys.modules for k in ('plotly', 'ipywidgets')):\n"
        "            sys.exit(f'importing {name} loaded plotly or ipywidgets')\n"
        "if 'tools.solutions' in sys.modules:\n"  # the solution tool works on labs/, outside the runtime
        "    sys.exit('a lab_utils module imported tools.solutions')\n"
        "import tools.solutions\n"  # test modules import solution(): ranks unpickle them
        "if 'nbformat' in sys.modules:\n"
        "    sys.exit('importing tools.solutions loaded nbformat (3 s of jsonschema in every rank)')\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_no_module_is_shadowed_by_a_name_of_its_package():
    """``lab_utils.X`` is the module X wherever there is one (a function ``launch`` once hid the
    module ``launch``, so ``lab_utils.launch.free_port`` failed)."""
    import lab_utils

    for info in pkgutil.walk_packages(lab_utils.__path__, "lab_utils."):
        module = importlib.import_module(info.name)
        parent, _, name = info.name.rpartition(".")
        assert getattr(importlib.import_module(parent), name) is module, f"{parent}.{name} is not the module"
