"""Print built decks to PDF handouts with the distribution's headless Chromium (no download).

    python slides/pdf.py                       # every deck in slides/build -> slides/build/pdf/
    python slides/pdf.py overview --out slides/build

reveal.js lays every slide out for printing when a deck is opened with ?print-pdf; the figures
are drawn first (deck.js draws all of them in print view), then Chromium prints one slide a page.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("decks", nargs="*", help="deck names (default: every built deck)")
    ap.add_argument("--out", type=Path, default=HERE / "build", help="folder holding the built decks")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} not found: run `bash slides/install_browser.sh` as root, or set CHROMIUM=")
    pages = [args.out / f"{n}.html" for n in args.decks] or sorted(
        p for p in args.out.glob("*.html") if p.name != "index.html"
    )
    (args.out / "pdf").mkdir(exist_ok=True)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page()
        for html in pages:
            page.goto(html.resolve().as_uri() + "?print-pdf")
            page.wait_for_function("window.deckStatus && deckStatus.drawn === deckStatus.figures", timeout=60_000)
            target = args.out / "pdf" / f"{html.stem}.pdf"
            page.pdf(path=str(target), prefer_css_page_size=True, print_background=True)
            print(f"slides: {target}")
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
