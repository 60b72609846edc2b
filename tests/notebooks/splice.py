"""A pytest plugin (``-p tests.notebooks.splice``, set in pyproject.toml's addopts): each lab's
exercises, solved and answered wrongly, run inside the lab's own nbval kernel (``solved_cells``)."""


def pytest_collection_modifyitems(session, config, items):
    from tests.notebooks import solved_cells

    solved_cells.insert(items)
