"""tools.ledger reads a lab's claims and the check() calls that prove them, and names each breach."""

from __future__ import annotations

from tools import ledger


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text):
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": 1}


HEAD = md(
    "# Lab\n\n**What this lab shows**\n\n1. `one-allreduce` One all-reduce per update,\n"
    "   not K.\n2. `bucket-cap` Buckets hold 25 MiB (source: PyTorch, distributed.py).\n\n**Time:** 75 min\n"
)


def test_reads_measured_and_cited_claims_with_their_continuations():
    led = ledger.read({"cells": [HEAD]})
    assert [(c.id, c.cited) for c in led.core] == [("one-allreduce", False), ("bucket-cap", True)]
    assert led.core[0].text == "One all-reduce per update, not K."


def test_a_notebook_that_keeps_the_rules_has_no_problems():
    nb = {"cells": [HEAD, code("%time x = 1\ncheck(x == 1, 'one', claim='one-allreduce', hint='h')")]}
    assert ledger.problems(nb) == []


def test_each_breach_is_named():
    nb = {
        "cells": [
            HEAD,
            code("check(True, 'a')\ncheck(True, 'b', claim='nope')\ncheck(True, 'c', claim='bucket-cap')"),
            md("## Going further\n\n**What Going further shows**\n\n1. `later` More.\n"),
            code("check(True, 'd', claim='one-allreduce')"),
        ]
    }
    got = ledger.problems(nb)
    assert "cell 1: check() without a literal claim= (every ✓ names a ledger claim)" in got
    assert "cell 1: check(claim='nope') names no claim of the core ledger" in got
    assert "claim 'bucket-cap' cites a source and is checked too: one proof each" in got
    assert "claim 'one-allreduce' is proven by 0 check() calls, not exactly one (or cite a source)" in got
    assert "cell 3: check(claim='one-allreduce') names no claim of the Going further ledger" in got
    assert "claim 'later' is proven by 0 check() calls, not exactly one (or cite a source)" in got


def test_no_ledger_and_too_many_claims_are_named():
    assert ledger.problems({"cells": [md("# Lab")]})[0].startswith("no ledger")
    many = md("**What this lab shows**\n\n" + "".join(f"{i}. `c{i}` Claim (source: x).\n" for i in range(1, 10)))
    assert "9 core claims; the ledger holds at most 8" in ledger.problems({"cells": [many]})
