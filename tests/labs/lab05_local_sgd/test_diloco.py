"""local_sgd.diloco: the stored study is the one the module's settings describe (so the lab's
prose and the file cannot drift apart), and the live grid runs on 2 ranks."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lab_utils.labs.lab05_local_sgd import diloco
from lab_utils.launcher import launch


def test_the_stored_study_matches_the_modules_settings():
    s = diloco.load_stored()
    cfg = s.config
    assert {k: getattr(cfg, k) for k in diloco.STORED} == diloco.STORED and cfg.seeds == list(diloco.SEEDS)
    assert set(s.results) == {f"{lr}/{mu}" for lr, mu in diloco.GRID}
    for r in s.results.values():
        assert len(r.final) == len(diloco.SEEDS) == len(r.seeds)
        # every synchronous step all-reduces the gradients, every round the outer gradient
        assert r.rounds == cfg.warmup + cfg.rounds


def test_the_stored_study_writes_back_byte_for_byte():
    s = diloco.load_stored()
    results = {key: p.stored() for key, p in s.results.items()}
    text = json.dumps({"config": dataclasses.asdict(s.config), "results": results}, indent=1) + "\n"
    assert text == diloco.STORED_FILE.read_text()  # main() writes the file the loader reads


@pytest.mark.slow
def test_the_grid_runs_and_plain_averaging_differs_from_momentum():
    ranks = launch(diloco.grid, 2, kwargs=dict(H=2, rounds=2, warmup=2, seeds=(0, 1), evals=2), timeout=300)
    r = ranks[0]
    assert set(r) == {f"{lr}/{mu}" for lr, mu in diloco.GRID}
    assert all(v.rounds == 4 for v in r.values()) and len({v.bytes for v in r.values()}) == 1
    assert r["1.0/0.0"].final != r["1.0/0.9"].final  # the outer step changes the model
    assert ranks[1]["1.0/0.0"].final == r["1.0/0.0"].final  # the held-out loss of the ranks' mean model
