"""Build the slide decks: labs/NN_lab/deck.md and slides/overview.md -> slides/build/<deck>.html
(reveal.js, works offline).

    python slides/build.py                 # every deck (what `make slides` runs)
    python slides/build.py 01_gradient_checkpointing overview   # some decks
    python slides/build.py --list          # deck names, one a line

A deck source is Markdown written for a projector:

    ---                                    front matter: title, lab (the notebook it goes with)
    title: Gradient checkpointing
    lab: 01_gradient_checkpointing.ipynb
    ---
    # Keep or recompute?                   slides are separated by a line holding only ---
    {{ figure: graph_plain }}              the lab's cell tagged figure:graph_plain (its stored output)
    {{ figure: 03/comm height=520 }}       a figure of lab 03 (for decks of no lab, the overview)
    Note: what to say                      everything after Note: goes to the speaker view (S)

Figures are the labs' own: the stored output of a lab cell tagged ``figure:<name>`` (see
lab_figures.py), so a deck never shows a figure its lab does not, and building runs nothing. They
are embedded as plotly JSON and drawn in the browser, so they keep hover, legends and sliders.
Nothing is loaded from the network: reveal.js is vendored by fetch_assets.sh, plotly.js is copied
from the pip package here. After changing a lab, `make execute NB=...` stores its figures anew.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import mistune
import plotly
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

HERE = Path(__file__).resolve().parent
LABS = HERE.parent / "labs"
ASSETS_SRC = HERE / "assets"
sys.path.insert(0, str(HERE))
import lab_figures  # noqa: E402  (slides/lab_figures.py, found through the path above)

SEPARATOR = re.compile(r"^---[ \t]*$", re.M)
FIGURE = re.compile(r"^\{\{\s*figure:\s*([\w/]+)((?:\s+\w+=[\w.%-]+)*)\s*\}\}[ \t]*$", re.M)
SLIDE_ATTRS = re.compile(r"^<!--\s*\.slide:(.*?)-->\s*\n?", re.S)
NOTE = re.compile(r"^Note:[ \t]*", re.M)
FIGURE_FONT = 18  # px: readable from the back of a room

_markdown = mistune.create_markdown(escape=False, plugins=["table", "strikethrough"])


@dataclass
class Deck:
    name: str
    title: str
    lab: str | None
    slides: list[str]  # Markdown of each slide (notes included)
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def figure_names(self) -> list[str]:
        return [m.group(1) for s in self.slides for m in FIGURE.finditer(s)]


def sources() -> dict[str, Path]:
    """Each deck's name and source: ``overview`` (slides/overview.md), then each lab's
    ``labs/NN_lab/deck.md``, named by its folder."""
    labs = {p.parent.name: p for p in sorted(LABS.glob("[0-9][0-9]_*/deck.md"))}
    return {"overview": HERE / "overview.md", **labs}


def parse(path: Path) -> Deck:
    """Read a deck source: front matter (key: value lines between --- lines), then slides. A
    lab's deck (``deck.md``) is named by its lab's folder."""
    text = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    if text.startswith("---"):
        _, head, text = SEPARATOR.split(text, maxsplit=2)
        for line in head.strip().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"{path.name}: front matter line {line!r} is not 'key: value'")
            meta[key.strip()] = value.strip()
    if "title" not in meta:
        raise ValueError(f"{path.name}: the front matter needs a 'title:' line")
    slides = [s.strip("\n") for s in SEPARATOR.split(text) if s.strip()]
    if not slides:
        raise ValueError(f"{path.name}: no slides (separate slides by a line holding only ---)")
    lab = meta.get("lab") or None
    name = path.parent.name if path.name == "deck.md" else path.stem
    return Deck(name=name, title=meta["title"], lab=None if lab == "none" else lab, slides=slides, meta=meta)


def discover(names: list[str] | None = None) -> list[Deck]:
    """Every deck (or those named), the overview first, then the labs in order."""
    known = sources()
    paths = list(known.values())
    if names:
        missing = [n for n in names if n not in known]
        if missing:
            raise SystemExit(f"no deck named {missing}; decks: {sorted(known)}")
        paths = [known[n] for n in names]
    decks = [parse(p) for p in paths]
    return sorted(decks, key=lambda d: (d.lab is not None, d.name))  # decks of no lab (overview) first


def figure_html(name: str, options: str, fig_id: str, lab: str | None = None) -> tuple[str, str]:
    """A placeholder div (drawn by deck.js when its slide is shown) and the figure's JSON."""
    opts = dict(o.split("=", 1) for o in options.split())
    spec = lab_figures.figure(name, default_lab=lab)
    fig = go.Figure(data=spec.get("data", []), layout=spec.get("layout", {}), frames=spec.get("frames") or None)
    fig.update_layout(width=None, height=None, autosize=True)
    size = (fig.layout.font.size or 12) if fig.layout.font else 12
    fig.update_layout(font_size=max(size, FIGURE_FONT))
    if fig.layout.title and fig.layout.title.text:  # room for the title above a top legend
        fig.update_layout(title_y=0.98, title_yanchor="top", margin_t=max(fig.layout.margin.t or 0, 100))
    spec = json.loads(pio.to_json(fig, validate=False))
    payload = json.dumps(
        {
            "data": spec.get("data", []),
            "layout": spec.get("layout", {}),
            "frames": spec.get("frames", []),
            "name": name,
        },
        separators=(",", ":"),
    )
    payload = payload.replace("</", "<\\/")  # never close the <script> early
    height = opts.get("height", "520")
    style = f"height:{height}px" if height.isdigit() else f"height:{height}"
    div = (
        f'<div class="plotly-slot" id="{fig_id}-div" data-fig="{fig_id}" data-name="{html.escape(name)}" '
        f'style="{style}"></div>'
    )
    return div, f'<script type="application/json" id="{fig_id}">{payload}</script>'


def render_slide(source: str, deck: Deck, index: int, scripts: list[str]) -> str:
    attrs = ""
    m = SLIDE_ATTRS.match(source)
    if m:
        attrs, source = " " + m.group(1).strip(), source[m.end() :]
    body, notes = NOTE.split(source, maxsplit=1) if NOTE.search(source) else (source, "")

    def replace(match: re.Match) -> str:
        fig_id = f"fig{len(scripts)}"
        div, script = figure_html(match.group(1), match.group(2), fig_id, deck.lab)
        scripts.append(script)
        return div

    body = FIGURE.sub(replace, body)
    out = f'<section data-slide="{index}"{attrs}>\n{_markdown(body)}'
    if notes.strip():
        out += f'<aside class="notes">\n{_markdown(notes)}</aside>\n'
    return out + "</section>"


def render(deck: Deck) -> str:
    scripts: list[str] = []
    sections = "\n".join(render_slide(s, deck, i, scripts) for i, s in enumerate(deck.slides))
    lab = (
        f'<div class="deck-footer">{html.escape(deck.title)} · lab <code>{html.escape(deck.lab)}</code></div>'
        if deck.lab
        else f'<div class="deck-footer">{html.escape(deck.title)}</div>'
    )
    return TEMPLATE.format(
        title=html.escape(deck.title),
        sections=sections,
        figures="\n".join(scripts),
        footer=lab,
        deck=html.escape(deck.name),
    )


def write_assets(out: Path) -> None:
    """reveal.js must have been vendored by fetch_assets.sh; plotly.js comes from the pip package."""
    assets = out / "assets"
    if not (assets / "reveal" / "dist" / "reveal.js").exists():
        subprocess.run(["bash", str(HERE / "fetch_assets.sh")], check=True, env=dict(os.environ, SLIDES_BUILD=str(out)))
    plotly_js = assets / "plotly.min.js"
    stamp = assets / "plotly.version"
    if not plotly_js.exists() or not stamp.exists() or stamp.read_text() != plotly.__version__:
        plotly_js.write_text(get_plotlyjs(), encoding="utf-8")
        stamp.write_text(plotly.__version__)
    for f in ASSETS_SRC.iterdir():
        shutil.copy2(f, assets / f.name)


def write_index(out: Path, built: list[dict]) -> None:
    rows = "\n".join(
        f'<li><a href="{d["file"]}">{html.escape(d["title"])}</a> '
        f"<span>{d['slides']} slides, {d['figures']} live figures"
        + (f" · lab <code>{html.escape(d['lab'])}</code>" if d["lab"] else "")
        + "</span></li>"
        for d in built
    )
    (out / "index.html").write_text(INDEX.format(rows=rows), encoding="utf-8")
    (out / "decks.json").write_text(json.dumps(built, indent=2), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("decks", nargs="*", help="deck names (overview, or a lab's folder name); default: all")
    ap.add_argument("--out", type=Path, default=HERE / "build", help="output folder (default slides/build)")
    ap.add_argument("--list", action="store_true", help="print the deck names and exit")
    args = ap.parse_args(argv)
    decks = discover(args.decks)
    if args.list:
        print("\n".join(d.name for d in decks))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    write_assets(args.out)
    built, failed = [], []
    for deck in decks:
        start = time.perf_counter()
        try:
            page = render(deck)
        except Exception as err:  # build the other decks, fail at the end
            failed.append(deck.name)
            print(f"slides: deck {deck.name} FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        (args.out / f"{deck.name}.html").write_text(page, encoding="utf-8")
        seconds = time.perf_counter() - start
        built.append(
            {
                "name": deck.name,
                "file": f"{deck.name}.html",
                "title": deck.title,
                "lab": deck.lab,
                "slides": len(deck.slides),
                "figures": len(deck.figure_names),
                "figure_names": deck.figure_names,
                "seconds": round(seconds, 2),
            }
        )
        print(f"slides: {deck.name}.html  {len(deck.slides)} slides, {len(deck.figure_names)} figures, {seconds:.1f} s")
    if args.decks:  # a partial build keeps the other decks' entries
        manifest = args.out / "decks.json"
        old = {d["name"]: d for d in json.loads(manifest.read_text())} if manifest.exists() else {}
        old.update({d["name"]: d for d in built})
        order = [d.name for d in discover()]
        built = [old[n] for n in order if n in old and (args.out / old[n]["file"]).exists()]
    else:
        for stale in set(args.out.glob("*.html")) - {args.out / d["file"] for d in built} - {args.out / "index.html"}:
            stale.unlink()  # a deck whose source was removed
    write_index(args.out, built)
    print(f"slides: open {args.out / 'index.html'} (works offline, from the file system)")
    if failed:
        print(f"slides: {len(failed)} deck(s) failed: {failed}", file=sys.stderr)
        return 1
    return 0


TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/reveal/dist/reset.css">
<link rel="stylesheet" href="assets/reveal/dist/reveal.css">
<link rel="stylesheet" href="assets/reveal/dist/theme/white.css">
<link rel="stylesheet" href="assets/reveal/plugin/highlight/monokai.css">
<link rel="stylesheet" href="assets/deck.css">
</head>
<body data-deck="{deck}">
<div class="reveal">
<div class="slides">
{sections}
</div>
{footer}
</div>
<script src="assets/plotly.min.js"></script>
<script src="assets/reveal/dist/reveal.js"></script>
<script src="assets/reveal/plugin/notes/notes.js"></script>
<script src="assets/reveal/plugin/highlight/highlight.js"></script>
{figures}
<script src="assets/deck.js"></script>
</body>
</html>
"""

INDEX = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Slide decks</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/deck.css"></head>
<body class="deck-index">
<h1>Training models efficiently with PyTorch: slide decks</h1>
<p>Keys in a deck: arrows or space to move, <b>S</b> speaker view with notes, <b>F</b> full screen,
<b>Esc</b> overview. PDF: open a deck with <code>?print-pdf</code> and print to PDF.</p>
<ul>
{rows}
</ul>
</body>
</html>
"""

if __name__ == "__main__":
    raise SystemExit(main())
