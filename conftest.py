"""pytest hooks for the whole tree (the fixtures live in tests/conftest.py)."""


def pytest_collection_modifyitems(session, config, items):
    """Each lab's exercises, solved and answered wrongly, run in the lab's own nbval kernel."""
    from tests import solved_cells

    solved_cells.insert(items)
