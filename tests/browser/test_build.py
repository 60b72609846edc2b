"""The deck builder without a browser: sources parse, every figure a deck names is registered,
and rendering puts slides, notes and figure JSON where deck.js and the browser tests expect them."""

from __future__ import annotations

import importlib
import json
import re

import plotly.graph_objects as go
import pytest

from .test_decks import DECKS, SLIDES, builder


def test_decks_found_and_parsed():
    names = sorted(p.stem for p in (SLIDES / "decks").glob("*.md"))
    assert sorted(DECKS) == names and names, names
    for deck in DECKS.values():
        assert deck.title and len(deck.slides) >= 3, deck.name
        assert deck.lab is None or (SLIDES.parent / "labs" / deck.lab).name == deck.lab


@pytest.mark.parametrize("name", sorted(DECKS))
def test_every_named_figure_is_registered(name):
    """Import the figure modules a deck names (no experiment runs) and find each figure."""
    figures = builder().figures
    for fig in DECKS[name].figure_names:
        topic = fig.partition(".")[0]
        importlib.import_module(f"figures.{topic}")
        assert fig in figures._REGISTRY, f"{name}: {fig} is not registered in slides/figures/{topic}.py"


def test_render_slides_notes_and_figures(tmp_path, monkeypatch):
    b = builder()
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2], name="</script><b>x"))
    fig.update_layout(title="T", sliders=[dict(steps=[dict(label="one", method="restyle", args=[{}])])])
    monkeypatch.setitem(b.figures._CACHE, "demo.bars", (fig, 0.0))
    src = tmp_path / "demo.md"
    src.write_text(
        "---\ntitle: Demo <deck>\nlab: none\n---\n# One\n\nNote:\nsay *this*\n\n---\n"
        '<!-- .slide: class="title" -->\n## Two\n\n{{ figure: demo.bars height=300 }}\n'
    )
    deck = b.parse(src)
    assert deck.lab is None and deck.figure_names == ["demo.bars"] and len(deck.slides) == 2
    page = b.render(deck)
    sections = re.findall(r"<section[^>]*>", page)
    assert sections == ['<section data-slide="0">', '<section data-slide="1" class="title">']
    assert page.count('<aside class="notes">') == 1 and "<em>this</em>" in page
    assert "Demo &lt;deck&gt;" in page
    payload = re.search(r'<script type="application/json" id="fig0">(.*?)</script>', page, re.S).group(1)
    spec = json.loads(payload)  # "</" was escaped, so the script did not end early
    assert spec["data"][0]["name"] == "</script><b>x" and spec["layout"]["sliders"]
    assert "height" not in spec["layout"] and spec["layout"]["font"]["size"] >= b.FIGURE_FONT
    assert 'data-fig="fig0"' in page and "height:300px" in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "a deck references the network"


def test_figures_registry_errors_say_what_to_do():
    figures = builder().figures
    with pytest.raises(KeyError, match="no module figures/nosuchtopic.py"):
        figures.get("nosuchtopic.x")
    with pytest.raises(ValueError, match="topic.what"):
        figures.figure("nodot")
