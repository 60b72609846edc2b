"""Shared fixtures: the process-table check that no rank outlives its test (helpers for tests to
import live in ``tests/helpers``)."""

from __future__ import annotations

import pytest

from tests.helpers.ranks import kill, rank_processes, wait_no_ranks


@pytest.fixture
def no_orphans():
    """Fails the test if any rank process is still alive shortly after it, and kills what it left,
    so one leak fails one test instead of every test after it."""
    kill(rank_processes())  # left by an earlier test, which has already failed for it
    yield
    left = wait_no_ranks()
    if left:
        kill(left)
        pytest.fail(f"processes left behind (now killed): {left}")


def pytest_collection_modifyitems(config, items):
    """A test that starts real processes (it is checked for orphans) is slow: ``make quick``
    (``-m "not slow"``) leaves it out of the edit-run loop."""
    for item in items:
        if "no_orphans" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
