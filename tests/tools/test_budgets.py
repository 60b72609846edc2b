"""tools.budgets counts a lab's core path: the cells before "Going further" only."""

from __future__ import annotations

import json

from tools import budgets


def test_counts_the_core_and_stops_at_going_further(tmp_path):
    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}

    def code(text, out=""):
        outputs = [{"output_type": "stream", "name": "stdout", "text": out}] if out else []
        return {"cell_type": "code", "metadata": {}, "source": text, "outputs": outputs, "execution_count": 1}

    nb = {
        "cells": [
            md("# Lab\n\nfive words of prose here"),
            code("x = 1\n\ncheck(x == 1, 'one', claim='x')", "✓ one\nsecond line that is wider\n"),
            md("## Going further\n\nmany more words that do not count at all"),
            code("check(True, 'later')", "✓ later\n"),
        ]
    }
    path = tmp_path / "99_demo.ipynb"
    path.write_text(json.dumps(nb))
    b = budgets.measure(path)
    assert (b.words, b.code_lines, b.check_calls, b.ticks) == (7, 2, 1, 1)
    assert (b.longest_printout, b.widest_printout) == (2, len("second line that is wider"))


def test_a_summary_above_the_going_further_heading_in_its_cell_counts(tmp_path):
    cell = {
        "cell_type": "markdown",
        "metadata": {},
        "source": "## Summary\n\nthree more words\n\n## Going further\n\nnot these",
    }
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Lab\n\nfive words of prose here"}, cell]}
    path = tmp_path / "99_demo.ipynb"
    path.write_text(json.dumps(nb))
    assert budgets.measure(path).words == 7 + 5
