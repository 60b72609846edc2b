"""Lab 1 figures: what checkpointing keeps and recomputes, measured on real modules."""

from __future__ import annotations

import plotly.graph_objects as go

from figures import figure

NODES = {"x": (0.0, 0.0), "A": (1.0, 0.8), "B": (1.0, -0.8), "C": (2.0, 0.0), "loss": (3.0, 0.0)}
EDGES = [("x", "A"), ("x", "B"), ("A", "C"), ("B", "C"), ("C", "loss")]


def _abc(checkpointed: bool):
    """A = tanh(Wa x), B = tanh(Wb x), C = A + B: bytes kept for backward, calls re-run in backward."""
    import torch
    from torch import nn

    from lab_utils.checkpointing import checkpoint_region
    from lab_utils.memory import SavedTensorMeter, fmt_bytes
    from lab_utils.models import seed_everything
    from lab_utils.recompute import CallCounter

    seed_everything(0)

    class AB(nn.Module):
        def __init__(self, d: int = 256):
            super().__init__()
            self.a, self.b = nn.Sequential(nn.Linear(d, d), nn.Tanh()), nn.Sequential(nn.Linear(d, d), nn.Tanh())

        def forward(self, x):
            return self.a(x) + self.b(x)  # C = A + B

    ab, x = AB(), torch.randn(64, 256, requires_grad=True)
    with CallCounter(ab) as calls:
        with SavedTensorMeter(ab) as meter:  # x counts: a checkpoint keeps its input
            c = checkpoint_region(ab, x) if checkpointed else ab(x)
        c.pow(2).mean().backward()
    status = {"x": "input", "C": "", "loss": ""}
    for node, mod in (("A", "a"), ("B", "b")):
        kept = sum(b for name, b in meter.by_module.items() if name.startswith(mod))
        status[node] = "recomputed" if calls.recomputed[mod] else ("kept" if kept else "dropped")
    notes = {"A": "", "B": ""}
    if not checkpointed:
        notes = {
            n: fmt_bytes(sum(b for k, b in meter.by_module.items() if k.startswith(m)))
            for n, m in (("A", "a"), ("B", "b"))
        }
    return status, notes, meter.total_bytes


@figure("checkpointing.graph_plain")
def graph_plain() -> go.Figure:
    from lab_utils.memory import fmt_bytes
    from lab_utils.plots.checkpointing import graph_figure

    status, notes, total = _abc(False)
    return graph_figure(
        NODES,
        EDGES,
        status=status,
        notes=notes,
        title=f"Without checkpointing: x, A and B are kept ({fmt_bytes(total)}, measured)",
    )


@figure("checkpointing.graph_ckpt")
def graph_ckpt() -> go.Figure:
    from lab_utils.memory import fmt_bytes
    from lab_utils.plots.checkpointing import graph_figure

    status, notes, total = _abc(True)
    return graph_figure(
        NODES,
        EDGES,
        status=status,
        notes=notes,
        title=f"Checkpointed: only the input x is kept ({fmt_bytes(total)}); A, B re-run in backward",
    )


@figure("checkpointing.tradeoff")
def tradeoff() -> go.Figure:
    """Strategies on a chain of MLP blocks: memory kept against extra forward FLOPs, with the
    planner's optimal front and the sqrt(N) model, all measured here."""
    import torch

    from lab_utils import models
    from lab_utils.checkpointing import compare_strategies, optimal_front, profile_blocks
    from lab_utils.env import pick
    from lab_utils.plots.checkpointing import tradeoff_figure

    n, width, batch = pick(student=16, smoke=9), pick(student=128, smoke=64), pick(student=64, smoke=16)
    chain = models.mlp(width, n)
    x = torch.randn(batch, width)
    blocks = profile_blocks(chain, x)
    act, inp, cost = blocks
    rows = compare_strategies(
        chain, x, {"none": "none", "every block": "every block", "sqrt(N)": "sqrt(N)"}, repeat=1, blocks=blocks
    )
    base = rows[0]
    points = [
        dict(
            name=r["name"],
            memory=r["peak_model"] / base["peak_model"],
            extra_flops=r["extra_flops"] / r["forward_flops"],
        )
        for r in rows
    ]
    total_act, total_cost = sum(act), sum(cost)
    front = [(p.peak / total_act, p.recompute / total_cost) for p in optimal_front(act, inp, cost)]
    return tradeoff_figure(points, front=front, title=f"Memory against recompute, {n} blocks (measured)")
