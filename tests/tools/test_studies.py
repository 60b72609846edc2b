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
