"""tools.studies.diloco, lab 5's study generator: it writes back the stored file byte for byte, and
its grid runs on 2 ranks."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab05_local_sgd import diloco
from lab_utils.launcher import launch
from tools.studies import diloco as studies


def test_the_stored_study_writes_back_byte_for_byte():
    assert studies.dumps(diloco.load_stored()) == diloco.STORED_FILE.read_text()  # main() writes what loads


@pytest.mark.slow
def test_the_grid_runs_and_each_run_communicates_as_named():
    ranks = launch(studies.grid, 2, kwargs=dict(H=32, rounds=1, warmup=2, seeds=(0, 1), evals=2), timeout=300)
    r = ranks[0]
    assert set(r) == set(diloco.RUNS)
    rounds = {k: v.rounds - 2 for k, v in r.items()}  # after the 2 synchronous steps
    assert rounds == {"sync": 32, "H=8": 4, "H=32": 1, "H=128": 0, "never": 1, "DiLoCo 0.7/0.9": 1}
    assert r["never"].final == r["H=32"].final  # one round of 32 steps: never = H=32 here
    assert r["DiLoCo 0.7/0.9"].final != r["H=32"].final  # the outer step changes the model
    assert ranks[1]["H=8"].final == r["H=8"].final  # the held-out loss of the ranks' mean model


def _both_diloco(lab_train_diloco):
    """The generator's train_diloco and the lab's cell on this rank's batches: their largest difference."""
    import torch
    import torch.distributed as dist

    finals = []
    for train in (studies.train_diloco, lab_train_diloco):
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3).double()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(dist.get_rank())  # the ranks' data differ: averaging matters
        batches = [(torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randint(3, (8,), generator=g))
                   for _ in range(11)]  # fmt: skip
        train(model, opt, batches, lambda loss: None, H=3, outer_lr=0.7, outer_momentum=0.9, warmup=2)
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return (finals[0] - finals[1]).abs().max().item()


@pytest.mark.slow
def test_the_generator_trains_as_the_lab_s_cell():
    # the stored study comes from tools.studies.diloco.train_diloco; the lab teaches its own (cell 41)
    from tests.helpers.cells import notebook_functions

    lab = notebook_functions("05_local_sgd", "train_diloco")["train_diloco"]
    assert max(launch(_both_diloco, 2, args=(lab,), timeout=120)) < 1e-12
