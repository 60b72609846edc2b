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
def test_the_grid_runs_and_plain_averaging_differs_from_momentum():
    ranks = launch(studies.grid, 2, kwargs=dict(H=2, rounds=2, warmup=2, seeds=(0, 1), evals=2), timeout=300)
    r = ranks[0]
    assert set(r) == {f"{lr}/{mu}" for lr, mu in diloco.GRID}
    assert all(v.rounds == 4 for v in r.values()) and len({v.bytes for v in r.values()}) == 1
    assert r["1.0/0.0"].final != r["1.0/0.9"].final  # the outer step changes the model
    assert ranks[1]["1.0/0.0"].final == r["1.0/0.0"].final  # the held-out loss of the ranks' mean model
