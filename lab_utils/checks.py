"""Checks that teach: one friendly line when a claim holds, an AssertionError with a hint when not.

    cmp("grad of W", ours, reference)       # prints: exact / close (max diff) / DIFFERENT
    check(n_allreduce == 1, "one all-reduce per update", claim="one-allreduce", hint="is the forward inside no_sync()?")

    @grader("ckpt-hooks", "checkpoint with saved-tensor hooks", hint="reread section 2")
    def check_hooks(checkpoint_fn):
        ...measure, then assert ...            # a failed assert is the student's ✗
        return "1 forward recomputed"          # optional detail for the ✓ line

A grader prints one line, ○ (a stub ``...`` or ``NotImplementedError``), ✓ or ✗ with the hint,
and never raises, so Run All goes on. It is known by its exercise's id, the one the lab's
``solutions.py`` and the notebook's exercise cell carry (``ckpt-hooks``), never by a number: the
notebook numbers its exercises, so reordering them touches the notebook and its solutions only.
``check`` proves one of the lab's own claims, named by its id in the ledger at the top of the
notebook (``tools/ledger.py`` holds the rules): a broken one raises.
"""

from __future__ import annotations

import dis
import functools
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = [
    "cmp",
    "check",
    "max_abs_diff",
    "param_max_diff",
    "fingerprint",
    "grader",
    "NOT_ATTEMPTED",
    "PASSED",
    "FAILED",
]


class Mark(str):
    """A grader's verdict: compares equal to its mark, shows nothing as a cell's last value."""

    def _ipython_display_(self) -> None:  # the grader already printed its line
        pass


NOT_ATTEMPTED = Mark("○")  # the three marks a grader prints; tests look for them
PASSED = Mark("✓")
FAILED = Mark("✗")


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute elementwise difference (computed in float64)."""
    return (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0


def cmp(name: str, ours: torch.Tensor, reference: torch.Tensor, *, atol: float = 1e-6, quiet: bool = False) -> str:
    """Compare two tensors, print and return one of 'exact', 'close' or 'DIFFERENT'.

    The printed line holds no raw difference, so it is stable across machines; the difference
    goes into the returned verdict only through its class."""
    if ours.shape != reference.shape:
        verdict = "DIFFERENT"
        line = f"{name:<32} DIFFERENT shape {tuple(ours.shape)} vs {tuple(reference.shape)}"
    else:
        exact = torch.equal(ours.detach(), reference.detach())
        diff = max_abs_diff(ours, reference)
        verdict = "exact" if exact else ("close" if diff <= atol else "DIFFERENT")
        line = f"{name:<32} {verdict}" + ("" if exact else f" (max diff {'<=' if diff <= atol else '>'} {atol:g})")
    if not quiet:
        print(line)
    return verdict


def check(condition: bool, what: str, *, claim: str, hint: str = "") -> None:
    """Prove the lab's ledger claim ``claim`` (its id, listed at the top of the notebook): print
    '✓ what  [claim]' when ``condition`` holds, else raise AssertionError with the hint. Every ✓
    names its claim: a check without one is a TypeError."""
    if not isinstance(claim, str) or not claim:
        raise TypeError(f"check(..., claim={claim!r}): name the ledger claim this ✓ proves (its id)")
    if not condition:
        raise AssertionError(f"✗ {what}  [{claim}]" + (f"\n  hint: {hint}" if hint else ""))
    print(f"✓ {what}  [{claim}]")


def param_max_diff(a: torch.nn.Module | Iterable[torch.Tensor], b: torch.nn.Module | Iterable[torch.Tensor]) -> float:
    """Largest absolute difference over matching parameters of two models (or tensor lists)."""
    pa = list(a.parameters()) if isinstance(a, torch.nn.Module) else list(a)
    pb = list(b.parameters()) if isinstance(b, torch.nn.Module) else list(b)
    if len(pa) != len(pb):
        raise ValueError(f"different numbers of parameters: {len(pa)} vs {len(pb)}")
    return max((max_abs_diff(x, y) for x, y in zip(pa, pb)), default=0.0)


def fingerprint(params: torch.nn.Module | Iterable[torch.Tensor]) -> str:
    """A short hex digest of parameter values (exact bits): equal on two ranks means equal models."""
    tensors = list(params.parameters()) if isinstance(params, torch.nn.Module) else list(params)
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


_STUB_OPS = {
    "RESUME",
    "NOP",
    "CACHE",
    "LOAD_GLOBAL",
    "PUSH_NULL",
    "PRECALL",
    "CALL",
    "RAISE_VARARGS",
    "LOAD_CONST",
    "RETURN_CONST",
    "RETURN_VALUE",
    "COPY_FREE_VARS",
    "MAKE_CELL",
}


def _is_stub(value: Any) -> bool:
    """A function whose body does nothing but ``raise NotImplementedError()``: the shipped stub.
    Spotted without calling it, so an untouched exercise costs no launch of real ranks."""
    code = getattr(value, "__code__", None)
    if code is None or set(code.co_names) != {"NotImplementedError"}:
        return False
    return {i.opname for i in dis.get_instructions(code)} <= _STUB_OPS


def _unattempted(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_unattempted(v) for v in value)
    return value is Ellipsis or _is_stub(value)


def _raised_stub(err: BaseException) -> bool:
    """True for the stub's NotImplementedError, raised here or inside a rank (launch's RankError)."""
    while err is not None:
        if isinstance(err, NotImplementedError) or getattr(err, "exc_type", "") == "NotImplementedError":
            return True
        err = err.__cause__ or err.__context__
    return False


def _brief(err: BaseException) -> str:
    """The error in a few lines: a rank's error (``RankError``) as its first line and the end of
    the rank's traceback (the student's line and the exception), not the launcher's frames."""
    remote = getattr(err, "remote_traceback", "")
    if not remote:
        return str(err)
    tail = [line for line in remote.strip().splitlines() if line.strip()][-3:]
    return str(err).splitlines()[0] + "\n" + "\n".join(tail)


def _say(mark: Mark, line: str) -> Mark:
    print(f"{mark} {line}")
    return mark


def grader(
    exercise: str, title: str, *, hint: str, todo: str | None = None
) -> Callable[[Callable[..., str | None]], Callable[..., str]]:
    """Turn ``check(*student_things)`` into the grader of the exercise ``exercise`` (its id in the
    lab's solutions file), which prints ○, ✓ or ✗ and ``title``.

    The wrapped function measures the student's code and asserts; it may return a short detail
    for the ✓ line. ``hint`` says which section to reread when the attempt is wrong; ``todo``, when
    given, is what the ○ line says instead (a hint that names the answer's key call would give
    the exercise away before any attempt). The grader
    returns the mark it printed (``NOT_ATTEMPTED``, ``PASSED`` or ``FAILED``) and never raises;
    its ``exercise`` attribute is the id."""

    def wrap(check_fn: Callable[..., str | None]) -> Callable[..., str]:
        @functools.wraps(check_fn)
        def graded(*args: Any, **kwargs: Any) -> str:
            stubs = [v for v in (*args, *kwargs.values()) if _unattempted(v)]
            if stubs:
                what = "Write the code above" if any(callable(v) for v in stubs) else "Fill in the `...` above"
                return _say(NOT_ATTEMPTED, f"{title}: not attempted yet. {what}; hint: {todo or hint}")
            try:
                detail = check_fn(*args, **kwargs)
            except AssertionError as err:
                return _say(FAILED, f"{title}: {err}\n  hint: {hint}")
            except Exception as err:  # noqa: BLE001 - the student's code raised: a ✗, not a traceback
                if _raised_stub(err):
                    return _say(
                        NOT_ATTEMPTED, f"{title}: not attempted yet. Write the code above; hint: {todo or hint}"
                    )  # noqa: E501
                return _say(FAILED, f"{title}: your code raised {type(err).__name__}: {_brief(err)}\n  hint: {hint}")
            return _say(PASSED, title + (f": {detail}" if detail else ""))

        graded.exercise = exercise
        return graded

    return wrap
