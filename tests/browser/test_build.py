"""The deck builder without a browser: sources parse, and rendering puts slides, notes and figure
JSON where deck.js and the browser tests expect them. (That every deck figure is a lab cell's
stored figure is tested in tests/tools/test_slides.py, part of `make test`.)"""

from __future__ import annotations

import json
import re

import plotly.graph_objects as go

from .test_decks import DECKS, SLIDES, builder


def test_decks_found_and_parsed():
    labs = sorted(p.parent.name for p in (SLIDES.parent / "labs").glob("[0-9][0-9]_*/deck.md"))
    assert sorted(DECKS) == sorted(["overview", *labs]) and labs, labs
    for deck in DECKS.values():
        assert deck.title and len(deck.slides) >= 3, deck.name
        assert deck.lab is None or deck.lab == f"{deck.name}.ipynb", (deck.name, deck.lab)


def test_render_slides_notes_and_figures(tmp_path, monkeypatch):
    b = builder()
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2], name="</script><b>x"))
    fig.update_layout(title="T", sliders=[dict(steps=[dict(label="one", method="restyle", args=[{}])])])
    monkeypatch.setattr(b.lab_figures, "figure", lambda ref, default_lab=None: json.loads(fig.to_json()))
    src = tmp_path / "demo.md"
    src.write_text(
        "---\ntitle: Demo <deck>\nlab: none\n---\n# One\n\nNote:\nsay *this*\n\n---\n"
        '<!-- .slide: class="title" -->\n## Two\n\n{{ figure: demo/bars height=300 }}\n'
    )
    deck = b.parse(src)
    assert deck.lab is None and deck.figure_names == ["demo/bars"] and len(deck.slides) == 2
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
