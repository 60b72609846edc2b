#!/usr/bin/env bash
# Vendor the decks' front-end files into slides/build/assets so a built deck loads nothing from the
# network: reveal.js (npm registry, exact version and checksum from slides/package-lock.json).
# plotly.js is written by build.py from the pip `plotly` package, so it always matches the figures.
# Idempotent: does nothing when the assets already match the lock file. Needs node + npm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${SLIDES_BUILD:-$here/build}"
mkdir -p "$build" && build="$(cd "$build" && pwd)"
assets="$build/assets"
npm_dir="$build/npm"
stamp="$assets/reveal/.lock-sha256"

want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_assets.sh: npm not found. Install Node.js 18+ with npm (e.g. 'apt-get install nodejs npm')," >&2
    echo "then run 'make slides' again; the decks vendor reveal.js from the npm registry through it." >&2
    exit 1
fi
echo "slides: vendoring reveal.js into $assets/reveal (npm ci, cached in ~/.npm)"
mkdir -p "$npm_dir"
cp "$here/package.json" "$here/package-lock.json" "$npm_dir/"
(cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
src="$npm_dir/node_modules/reveal.js"
rm -rf "$assets/reveal"
mkdir -p "$assets/reveal/dist/theme/fonts" "$assets/reveal/plugin"
cp "$src/dist/reveal.js" "$src/dist/reveal.css" "$src/dist/reset.css" "$assets/reveal/dist/"
# One theme (white), whose fonts ship in the package; other themes import fonts from the web.
cp "$src/dist/theme/white.css" "$assets/reveal/dist/theme/"
cp -r "$src/dist/theme/fonts/source-sans-pro" "$assets/reveal/dist/theme/fonts/"
for plugin in notes highlight; do
    mkdir -p "$assets/reveal/plugin/$plugin"
    cp "$src/plugin/$plugin/$plugin.js" "$assets/reveal/plugin/$plugin/"
done
cp "$src/plugin/highlight/monokai.css" "$assets/reveal/plugin/highlight/"
cp "$src/LICENSE" "$assets/reveal/LICENSE"
# Refuse assets that would reach the network (a theme importing remote fonts, say).
if grep -rlE "url\((\"|')?(https?:)?//" "$assets/reveal" --include=*.css; then
    echo "fetch_assets.sh: the CSS files above import remote resources; pick another theme" >&2
    exit 1
fi
echo "$want" > "$stamp"
