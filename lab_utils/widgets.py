"""Widget glue: redraw a plotly figure inside an ``ipywidgets.Output``.

    out = ipywidgets.Output()
    def redraw(change):
        show_figure(out, make_figure(change["new"]), text="one line under the figure")
    slider.observe(redraw, names="value")

Why not ``go.FigureWidget``: with plotly 6+ it needs the ``anywidget`` package. Why not
``with out: fig.show()``: notebook runners that store no widget state (nbconvert, nbval) trip
over captured output. Setting ``out.outputs`` to plotly's own mime bundle works in JupyterLab
and in those runners alike, and replaces the previous figure instead of adding one below it.
"""

from __future__ import annotations

import json
from typing import Any

import plotly.io as pio

__all__ = ["show_figure"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def show_figure(out: Any, fig: Any, text: str = "") -> None:
    """Replace what the ``Output`` widget ``out`` shows with ``fig`` (and ``text`` below it)."""
    bundle = {PLOTLY_MIME: {**json.loads(pio.to_json(fig)), "config": {}}, "text/plain": "<Figure>"}
    outputs = [{"output_type": "display_data", "data": bundle, "metadata": {}}]
    if text:
        outputs.append({"output_type": "stream", "name": "stdout", "text": text + "\n"})
    out.outputs = tuple(outputs)
