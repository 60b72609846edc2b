"""The decks' figures: named builder functions that run small real experiments with ``lab_utils``
and draw them with the same ``lab_utils.plots`` functions the labs use.

    from figures import figure

    @figure("accumulation.gap")                 # a deck shows it with {{ figure: accumulation.gap }}
    def gap():
        ...run something small with lab_utils...
        return gap_figure(measured)             # a plotly figure, drawn when the deck is built

A name ``topic.what`` lives in ``figures/topic.py``; only the modules a deck names are imported, so a
deck for one lab never depends on another lab's code. Each figure is built once per build (cached),
even when several decks show it.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

import plotly.graph_objects as go

_REGISTRY: dict[str, Callable[[], go.Figure]] = {}
_CACHE: dict[str, tuple[go.Figure, float]] = {}


def figure(name: str) -> Callable[[Callable[[], go.Figure]], Callable[[], go.Figure]]:
    """Register ``fn`` (no arguments, returns a plotly figure) as the figure ``name`` ("topic.what")."""
    topic, _, what = name.partition(".")
    if not topic or not what:
        raise ValueError(f"figure name {name!r} must look like 'topic.what' (topic = module of figures/)")

    def register(fn: Callable[[], go.Figure]) -> Callable[[], go.Figure]:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"figure {name!r} is registered twice ({_REGISTRY[name].__module__} and {fn.__module__})")
        _REGISTRY[name] = fn
        return fn

    return register


def get(name: str) -> tuple[go.Figure, float]:
    """The figure ``name`` and the seconds its experiment took (built on first use, then cached)."""
    if name not in _CACHE:
        topic = name.partition(".")[0]
        if name not in _REGISTRY:
            try:
                importlib.import_module(f"{__name__}.{topic}")
            except ModuleNotFoundError as err:
                raise KeyError(f"figure {name!r}: no module figures/{topic}.py could be imported ({err})") from err
        if name not in _REGISTRY:
            known = sorted(n for n in _REGISTRY if n.startswith(topic + "."))
            raise KeyError(f"figure {name!r} is not registered in figures/{topic}.py; known there: {known}")
        start = time.perf_counter()
        fig = _REGISTRY[name]()
        if not isinstance(fig, go.Figure):
            raise TypeError(f"figure {name!r} returned {type(fig).__name__}, not a plotly Figure")
        _CACHE[name] = (fig, time.perf_counter() - start)
    return _CACHE[name]


def slider_over(figs: dict[str, go.Figure], *, label: str = "") -> go.Figure:
    """One figure with a plotly slider choosing among ``figs`` (same kind of figure, e.g. one per
    network link): the traces of the chosen one are shown and its title is used. This is how a
    lab's ipywidgets explorer becomes interactive in a static deck, with the lab's own figures."""
    names = list(figs)
    first = figs[names[0]]
    out = go.Figure(layout=first.layout)
    owner: list[int] = []
    for i, name in enumerate(names):
        for tr in figs[name].data:
            out.add_trace(tr.update(visible=(i == 0)))
            owner.append(i)
    steps = [
        dict(
            method="update",
            label=name,
            args=[{"visible": [o == i for o in owner]}, {"title.text": figs[name].layout.title.text}],
        )
        for i, name in enumerate(names)
    ]
    out.update_layout(
        sliders=[
            dict(
                active=0,
                steps=steps,
                currentvalue=dict(prefix=f"{label}: " if label else ""),
                pad=dict(t=60),
                len=0.9,
                x=0.05,
            )
        ]
    )
    return out
