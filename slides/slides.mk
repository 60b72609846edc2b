# Slide decks and real-browser tests. Included by the Makefile: `include slides/slides.mk`.
#   make slides        build every deck (labs/*/deck.md, slides/overview.md) into slides/build/ (offline HTML)
#   make slides-pdf    the same decks as PDF handouts (headless Chromium)
#   make browser-test  decks and labs in headless Chromium (needs `bash slides/install_browser.sh`)
SLIDES_OUT       ?= slides/build
BROWSER_TEST_OUT ?= build/slides-test

.PHONY: slides slides-pdf browser-test

# reveal.js is vendored from the npm registry (pinned by slides/package-lock.json, cached in
# ~/.npm); plotly.js comes from the pip package. Figures are the labs' stored figures (cells
# tagged figure:<name>), so building runs no experiment.
slides: $(STAMP)
	SLIDES_BUILD=$(SLIDES_OUT) bash slides/fetch_assets.sh
	$(BIN)/python slides/build.py --out $(SLIDES_OUT) $(DECKS)

slides-pdf: slides
	$(BIN)/python slides/pdf.py --out $(SLIDES_OUT) $(DECKS)

# Builds the decks into a scratch folder (your slides/build is left alone),
# then runs tests/browser: every deck from file:// and a local server, every lab in JupyterLab.
# Screenshots: artifacts/browser/.
browser-test: $(STAMP) $(OVERRIDES)
	SLIDES_BUILD=$(BROWSER_TEST_OUT) bash slides/fetch_assets.sh
	$(BIN)/python slides/build.py --out $(BROWSER_TEST_OUT)
	OMP_NUM_THREADS=1 LAB_BROWSER_TESTS=1 SLIDES_BUILD=$(BROWSER_TEST_OUT) $(BIN)/python -m pytest tests/browser \
		-p no:cacheprovider $(PYTEST_ARGS)
