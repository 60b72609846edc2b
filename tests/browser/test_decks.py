"""Every deck (labs/*/deck.md and the overview, found, not listed here), built by `make slides`, in real Chromium:
each slide renders, each figure draws with plotly and answers the mouse, no figure's title is hidden
under the slide heading or covered by its legend at 1280 x 720, nothing logs an error and no request
leaves the machine, from the file system and from a local web server."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from lab_utils.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]

SLIDES = ROOT / "slides"
BUILD = Path(os.environ.get("SLIDES_BUILD") or SLIDES / "build")
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD


@functools.cache
def builder():
    spec = importlib.util.spec_from_file_location("slides_build", SLIDES / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


DECKS = {d.name: d for d in builder().discover()}


def built(name: str) -> Path:
    html = BUILD / f"{name}.html"
    src = builder().sources()[name]
    assert html.exists(), f"{html.name} is missing: run `make slides`"
    assert html.stat().st_mtime >= src.stat().st_mtime, f"{html.name} is older than its source: run `make slides`"
    return html


def wait_ready(page) -> int:
    page.wait_for_function("window.Reveal && Reveal.isReady() && window.deckStatus", timeout=20_000)
    return page.evaluate("Reveal.getTotalSlides()")


def figures_of(page, index: int) -> list[dict]:
    """Wait until the figures of slide ``index`` are drawn; their size and drawn traces."""
    page.wait_for_function(
        """i => [...document.querySelectorAll(`section[data-slide="${i}"] .plotly-slot`)]
                 .every(s => s.dataset.drawn === 'done')""",
        arg=index,
        timeout=20_000,
    )
    return page.evaluate(
        """i => [...document.querySelectorAll(`section[data-slide="${i}"] .plotly-slot`)].map(s => {
               const r = s.getBoundingClientRect();
               return {name: s.dataset.name, w: r.width, h: r.height,
                       traces: (s._fullData || []).length,
                       marks: s.querySelectorAll('.trace, .point, .bars path, .table-control-view, .cell-rect').length,
                       svg: s.querySelectorAll('.main-svg').length};
           })""",
        index,
    )


def layout_problems(page, index: int) -> list[str]:
    """What a person would see wrong on slide ``index`` as laid out now: a figure's title (or a
    subplot title) hidden under the slide heading or cut off by the figure's box, and a legend
    drawn over a subplot title or the figure's title."""
    return page.evaluate(
        """i => {
          const sec = document.querySelector(`section[data-slide="${i}"]`);
          const r = el => el.getBoundingClientRect();
          // two boxes meet when they overlap by 3 px or more each way (touching edges do not count)
          const meet = (a, b) => Math.min(Math.min(a.right, b.right) - Math.max(a.left, b.left),
                                          Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top)) >= 3;
          const heads = [...sec.querySelectorAll('h1, h2, h3')].map(r);
          const out = [];
          for (const slot of sec.querySelectorAll('.plotly-slot')) {
            const box = r(slot);
            const titles = [...slot.querySelectorAll('.gtitle, .annotation-text-g')]
              .filter(t => t.textContent.trim()).map(t => [t.textContent.trim(), r(t)]);
            for (const [text, t] of titles) {
              if (heads.some(h => meet(h, t)))
                out.push(`${slot.dataset.name}: "${text}" is under the slide heading`);
              if (t.top < box.top - 1 || t.bottom > box.bottom + 1 || t.left < box.left - 1 || t.right > box.right + 1)
                out.push(`${slot.dataset.name}: "${text}" is cut off by the figure's box`);
            }
            for (const lg of slot.querySelectorAll('.legend')) {
              const l = r(lg);
              for (const [text, t] of titles)
                if (meet(l, t)) out.push(`${slot.dataset.name}: the legend covers "${text}"`);
            }
          }
          return out;
        }""",
        index,
    )


def check_deck(page, log, name: str, shots: Path | None = None) -> dict:
    deck = DECKS[name]
    total = wait_ready(page)
    assert total == len(deck.slides), f"{name}: {total} slides in the browser, {len(deck.slides)} in the source"
    seen_figures = []
    for i in range(total):
        page.evaluate("i => Reveal.slide(i)", i)
        page.wait_for_function("i => Reveal.getState().indexh === i", arg=i)
        box = page.evaluate(
            """i => { const s = document.querySelector(`section[data-slide="${i}"]`);
                      const r = s.getBoundingClientRect();
                      return {w: r.width, h: r.height, visible: getComputedStyle(s).display !== 'none',
                              text: s.innerText.trim().length, present: s.classList.contains('present')}; }""",
            i,
        )
        assert box["present"] and box["visible"] and box["w"] > 100 and box["h"] > 100, f"{name} slide {i}: {box}"
        figs = figures_of(page, i)
        assert box["text"] > 0 or figs, f"{name} slide {i} shows nothing"
        for f in figs:
            assert f["svg"] >= 1 and f["traces"] >= 1 and f["marks"] >= 1, (
                f"{name} slide {i}: {f['name']} drew nothing: {f}"
            )
            assert f["w"] > 300 and f["h"] > 150, f"{name} slide {i}: figure {f['name']} is too small: {f}"
        for problem in layout_problems(page, i):
            raise AssertionError(f"{name} slide {i}: {problem}")
        seen_figures += [f["name"] for f in figs]
        if shots is not None and i < 3:
            page.screenshot(path=str(shots / f"{name}-slide{i}.png"))
    assert seen_figures == deck.figure_names, f"{name}: drew {seen_figures}, the source names {deck.figure_names}"
    status = page.evaluate("window.deckStatus")
    assert status["drawn"] == status["figures"] == len(deck.figure_names) and not status["errors"], status
    return status


@pytest.mark.parametrize("name", sorted(DECKS))
def test_deck_offline_from_file(name, open_page, artifacts):
    """Opened from the file system: all slides, all figures, no error, no request off the machine."""
    page, log = open_page()
    page.goto(built(name).as_uri())
    check_deck(page, log, name, shots=artifacts)
    notes = page.evaluate("[...document.querySelectorAll('section')].map(s => !!s.querySelector('aside.notes'))")
    want = [("\nNote:" in "\n" + s) for s in DECKS[name].slides]
    assert notes == want, f"{name}: speaker notes present per slide {notes}, expected {want}"
    log.assert_clean()
    assert any(u.endswith("plotly.min.js") for u in log.requests), "plotly.js came from the vendored file"


@pytest.mark.parametrize("name", [n for n in sorted(DECKS) if DECKS[n].figure_names][:1] or ["-"])
def test_figures_answer_the_mouse_when_scaled(name, open_page, artifacts):
    """On a 1920x1080 projector reveal.js scales the slide; plotly's hover must still find the
    point under a real mouse, and a slider (where a figure has one) must change the figure."""
    if name == "-":
        pytest.fail("no deck has a figure")
    page, log = open_page(viewport=(1920, 1080))
    page.goto(built(name).as_uri())
    wait_ready(page)
    first = next(i for i, s in enumerate(DECKS[name].slides) if "{{ figure:" in s)
    page.evaluate("i => Reveal.slide(i)", first)
    figures_of(page, first)
    slot = page.locator(f'section[data-slide="{first}"] .plotly-slot').first
    points = slot.locator(".point, .bars path")
    assert points.count() > 0, "no data point to hover"
    hovered = False
    for k in range(min(points.count(), 6)):
        bb = points.nth(k).bounding_box()
        if not bb or bb["width"] * bb["height"] == 0:
            continue
        page.mouse.move(bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2)
        try:
            page.wait_for_function(
                "el => el.querySelectorAll('.hoverlayer .hovertext').length > 0",
                arg=slot.element_handle(),
                timeout=2_000,
            )
            hovered = True
            break
        except Exception:
            continue
    page.screenshot(path=str(artifacts / f"{name}-hover-1920.png"))
    assert hovered, "moving the mouse onto a data point showed no hover label"
    log.assert_clean()


def test_slider_figures_respond(open_page, artifacts):
    """Every deck figure with a plotly slider: clicking another step redraws it."""
    found = 0
    for name in sorted(DECKS):
        if not DECKS[name].figure_names:
            continue
        page, log = open_page()
        page.goto(built(name).as_uri())
        wait_ready(page)
        with_sliders = page.evaluate(
            """() => [...document.querySelectorAll('section')].filter(sec =>
                   [...sec.querySelectorAll('.plotly-slot')].some(s =>
                       (JSON.parse(document.getElementById(s.dataset.fig).textContent).layout.sliders || []).length))
               .map(sec => Number(sec.dataset.slide))"""
        )
        for i in with_sliders:
            page.evaluate("i => Reveal.slide(i)", i)
            figures_of(page, i)
            for slot in page.locator(f'section[data-slide="{i}"] .plotly-slot').all():
                rail = slot.locator(".slider-container .slider-rail-touch-rect")
                if not rail.count():
                    continue
                found += 1
                shown = "el => JSON.stringify([el.data.map(t => [t.x, t.y, t.visible]), el.layout.title])"
                before = slot.evaluate(shown)
                bb = rail.first.bounding_box()
                page.mouse.click(bb["x"] + bb["width"] - 3, bb["y"] + bb["height"] / 2)  # the last step
                page.wait_for_function(
                    f"([el, b]) => ({shown})(el) !== b", arg=[slot.element_handle(), before], timeout=5_000
                )
                page.screenshot(path=str(artifacts / f"{name}-slide{i}-slider-moved.png"))
        log.assert_clean()
    if not found:
        pytest.skip("no deck figure has a slider yet")


def test_index_and_decks_over_local_http(open_page):
    """Served by a local web server (python -m http.server): the index links every deck, and the
    first deck with figures works there too."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(BUILD))
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        page, log = open_page()
        page.goto(f"{base}/index.html")
        links = page.eval_on_selector_all("a", "as => as.map(a => a.getAttribute('href'))")
        assert sorted(links) == sorted(f"{n}.html" for n in DECKS), links
        manifest = json.loads((BUILD / "decks.json").read_text())
        assert [d["name"] for d in manifest] == [d.name for d in builder().discover()]
        name = next(n for n in sorted(DECKS) if DECKS[n].figure_names)
        page.goto(f"{base}/{name}.html")
        check_deck(page, log, name)
        log.assert_clean()
        assert all(u.startswith(base) or u.startswith("data:") for u in log.requests), log.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_every_lab_has_a_deck():
    labs = sorted(p.name for p in (ROOT / "labs").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    decked = {d.lab for d in DECKS.values()}
    missing = [lab for lab in labs if lab not in decked]
    assert not missing, f"labs without a deck.md in their folder: {missing}"
    assert any(d.lab is None for d in DECKS.values()), "an overview deck (lab: none) exists"
