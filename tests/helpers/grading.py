"""Test helper for the exercise graders."""

from __future__ import annotations

import contextlib


def graded_fail(grade, *args, match: str = "", **kwargs) -> str:
    """Run an exercise grader on a wrong answer; require the ✗ line (printed, not raised, so a
    lab's Run All goes on) and, if given, the regex ``match`` in it. Returns what it printed."""
    import io
    import re

    from lab_utils.checks import FAILED

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mark = grade(*args, **kwargs)
    text = out.getvalue()
    assert mark == FAILED and text.startswith(FAILED), f"expected a ✗ line, the grader printed: {text!r}"
    assert "\n  hint: " in text, f"a ✗ names the likely mistake in a hint: {text!r}"
    if match:
        assert re.search(match, text), f"the ✗ line does not match {match!r}: {text!r}"
    return text
