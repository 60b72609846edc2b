"""Checks that teach: one friendly line when a claim holds, an AssertionError with a hint when not.

from lab_utils.checks import cmp, check, params_close
cmp("grad of W", ours, reference)       # prints: exact / close (max diff) / DIFFERENT
check(n_allreduce == 1, "one all-reduce per update", hint="is the forward inside no_sync()?")
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["cmp", "check", "max_abs_diff", "params_close", "param_max_diff"]


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


def check(condition: bool, claim: str, *, hint: str = "") -> None:
    """Print '✓ claim' when ``condition`` holds, else raise AssertionError with the hint."""
    if not condition:
        raise AssertionError(f"✗ {claim}" + (f"\n  hint: {hint}" if hint else ""))
    print(f"✓ {claim}")


def param_max_diff(a: torch.nn.Module | Iterable[torch.Tensor], b: torch.nn.Module | Iterable[torch.Tensor]) -> float:
    """Largest absolute difference over matching parameters of two models (or tensor lists)."""
    pa = list(a.parameters()) if isinstance(a, torch.nn.Module) else list(a)
    pb = list(b.parameters()) if isinstance(b, torch.nn.Module) else list(b)
    if len(pa) != len(pb):
        raise ValueError(f"different numbers of parameters: {len(pa)} vs {len(pb)}")
    return max((max_abs_diff(x, y) for x, y in zip(pa, pb)), default=0.0)


def params_close(a, b, *, atol: float = 1e-6) -> bool:
    """True when every matching parameter differs by at most ``atol``."""
    return param_max_diff(a, b) <= atol
