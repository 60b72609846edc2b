"""'Your setup': time per update of the naive loop and of ``no_sync`` for a job you describe, and
the link speed above which ``no_sync`` stops mattering (overlap model, always *modelled*).

    from lab_utils.netmodel import LINKS
    from lab_utils.labs.lab03_ddp import calculator
    calculator.per_update(params=7e9, world_size=64, link=LINKS["100GbE"], micro_step_s=0.5, k=8)
    calculator.break_even_gbit(params=7e9, world_size=64, latency_s=10e-6, micro_step_s=0.5, k=8)
    calculator.widget()                     # the same, with sliders

What the job is reduced to: float32 gradients in DDP's 25 MiB buckets, ready evenly as the
backward runs (``netmodel.evenly_ready``), the backward taking ``backward_share`` of a micro-step.
No measurement here: a first estimate before you measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ipywidgets

from lab_utils.netmodel import (
    LINKS,
    Link,
    MicroStep,
    backward_with_comm,
    evenly_ready,
    naive_update_seconds,
    no_sync_update_seconds,
)

__all__ = ["ASSUMPTIONS", "Cost", "even_micro_step", "per_update", "break_even_gbit", "widget"]

ASSUMPTIONS = (
    "Assumed: float32 gradients in 25 MiB buckets (no smaller first bucket: DDP's real first bucket is "
    "1 MiB), ready evenly through the backward; the backward is 2/3 of a micro-step, the forward 1/3; "
    "a ring all-reduce per bucket; the optimizer step not counted. Modelled, not measured: the plain overlap "
    "model, which predicted too little on average in every run on lab 3's real 2-rank link (not at every "
    "point; other rank counts untested), so the naive time is a likely underestimate of the naive loop's cost."
)


@dataclass(frozen=True)
class Cost:
    """Seconds per update of the naive loop and of ``no_sync``, the saving (a fraction of the
    naive time), one round's communication and the part of it the backward cannot hide."""

    naive_s: float
    no_sync_s: float
    saving: float
    round_s: float
    exposed_s: float
    buckets: int


def even_micro_step(params: float, micro_step_s: float, *, backward_share: float = 2 / 3) -> MicroStep:
    """One synchronised micro-step of the job: its 25 MiB buckets of float32 gradients, evenly ready."""
    if not (params > 0 and micro_step_s > 0 and 0 < backward_share <= 1):
        raise ValueError(
            f"params={params}, micro_step_s={micro_step_s}: must be > 0; "
            f"backward_share={backward_share}: must be in (0, 1]"
        )
    total, cap = params * 4, 25 * 2**20
    sizes = [cap] * int(total // cap) + ([total % cap] if total % cap else [])
    backward = micro_step_s * backward_share
    return MicroStep(micro_step_s - backward, backward, evenly_ready(sizes, backward))


def per_update(params: float, world_size: int, link: Link, micro_step_s: float, k: int) -> Cost:
    """What one update of the job costs on ``link``, naive and with ``no_sync`` (``Cost``)."""
    micro = even_micro_step(params, micro_step_s)
    step = backward_with_comm(micro.buckets, micro.backward_s, link, world_size)
    naive = naive_update_seconds(micro, k, link, world_size)
    quiet = no_sync_update_seconds(micro, k, link, world_size)
    return Cost(naive, quiet, (naive - quiet) / naive, step.comm_s, step.exposed_s, len(micro.buckets))


def break_even_gbit(params: float, world_size: int, latency_s: float, micro_step_s: float, k: int) -> float:
    """The link bandwidth (Gbit/s, at ``latency_s``) above which ``no_sync`` saves less than 5 %
    of the naive loop's time per update (bisection: the saving falls as the link gets faster).
    ``inf`` if it never falls that low (latency alone costs more), 0 if it never exceeds it."""
    if k < 2:
        return 0.0  # one micro-step per update: nothing to skip

    def saving(gbit: float) -> float:
        link = Link.from_gbit("job", gbit, latency_s * 1e6)
        return per_update(params, world_size, link, micro_step_s, k).saving

    lo, hi, below = 1e-4, 1e6, 0.05  # Gbit/s; the saving the report calls negligible
    if saving(hi) >= below:
        return math.inf
    if saving(lo) < below:
        return 0.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if saving(mid) >= below else (lo, mid)
    return hi


def _report(params: float, world: int, link: Link, micro_s: float, k: int) -> str:
    got = per_update(params, world, link, micro_s, k)
    gbit = break_even_gbit(params, world, link.latency_s, micro_s, k)
    where = "never (latency alone)" if math.isinf(gbit) else f"{gbit:.3g} Gbit/s"
    return (
        f"<b>{params:.3g} parameters, {world} ranks, {link.name}, micro-step {1e3 * micro_s:.3g} ms, K = {k}</b>"
        f" (modelled: overlap model)<br>naive: {1e3 * got.naive_s:.4g} ms per update; "
        f"no_sync: {1e3 * got.no_sync_s:.4g} ms; saving {100 * got.saving:.1f} %<br>"
        f"one all-reduce round: {1e3 * got.round_s:.3g} ms in {got.buckets} buckets, of which the "
        f"backward cannot hide {1e3 * got.exposed_s:.3g} ms<br>no_sync saves under 5 % above: {where}"
    )


def widget(
    params: float = 1.3e9, world_size: int = 16, link: str = "100GbE", micro_step_ms: float = 200.0, k: int = 8
) -> ipywidgets.VBox:
    """Sliders for the job; the report under them is ``per_update`` and ``break_even_gbit``."""
    if link not in LINKS:
        raise ValueError(f"link={link!r} is not one of {list(LINKS)}")
    slider = dict(base=10, step=0.05, readout_format=".3g", continuous_update=False)
    w_params = ipywidgets.FloatLogSlider(value=params, min=6, max=12, description="parameters", **slider)
    w_world = ipywidgets.IntSlider(value=world_size, min=2, max=1024, description="ranks", continuous_update=False)
    w_link = ipywidgets.Dropdown(options=list(LINKS), value=link, description="link")
    w_micro = ipywidgets.FloatLogSlider(value=micro_step_ms, min=0, max=4, description="micro-step ms", **slider)
    w_k = ipywidgets.IntSlider(value=k, min=1, max=64, description="K", continuous_update=False)
    out = ipywidgets.HTML()

    def redraw(_: Any = None) -> None:
        out.value = _report(w_params.value, w_world.value, LINKS[w_link.value], w_micro.value / 1e3, w_k.value)

    for w in (w_params, w_world, w_link, w_micro, w_k):
        w.observe(redraw, names="value")
    redraw()
    return ipywidgets.VBox(
        [
            ipywidgets.HBox([w_params, w_world, w_link]),
            ipywidgets.HBox([w_micro, w_k]),
            ipywidgets.HTML(f"<i>{ASSUMPTIONS}</i>"),
            out,
        ]
    )
