# Two commands for a new user (see README.md):
#   make lab    set up .venv (once) and open the labs in JupyterLab on 127.0.0.1 with a token
#   make test   set up .venv (once) and run the whole test suite (unit tests + every notebook)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888

OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json

.PHONY: lab test quick setup lint unit notebooks execute solutions mutations clean help validate-link gpu-check

help:
	@echo "make lab          set up .venv (once) and open the labs in JupyterLab"
	@echo "make test         set up .venv (once) and run the whole suite: lint, unit tests, every lab"
	@echo "make setup        only build .venv (pinned packages, this project installed editable)"
	@echo "make lint         ruff: lint and format check (part of make test)"
	@echo "make quick        the edit-run loop: unit tests without the notebooks and the slow launches"
	@echo "make unit         the lab_utils unit tests alone"
	@echo "make notebooks    the labs alone, under nbval at the smoke size"
	@echo "make execute NB=labs/01_gradient_checkpointing/01_gradient_checkpointing.ipynb   re-run a lab"
	@echo "make solutions    instructors: the labs with their exercise solutions -> build/solutions/"
	@echo "make mutations    developers: plausible wrong code in taught claims, each must fail its tests"
	@echo "make slides       the decks -> slides/build/ (offline HTML)"
	@echo "make slides-pdf   the decks as PDF handouts (needs Chromium)"
	@echo "make browser-test decks and labs in headless Chromium (bash slides/install_browser.sh first)"
	@echo "make validate-link  root: lab 3's overlap model against a real shaped link (namespaces + tc)"
	@echo "make gpu-check    one CUDA GPU, <= 8 min: the step-memory calculator against the GPU's meters"
	@echo "make clean        remove .venv and build outputs"

# The environment is rebuilt only when pyproject.toml changes, so a second run is quick.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[browser]'
	@touch $(STAMP)

setup: $(STAMP)

# Project settings for JupyterLab (no news pop-up, no update check), installed into .venv's
# application settings, so a user's own JupyterLab settings are left alone.
$(OVERRIDES): labs/.jupyterlab-overrides.json $(STAMP)
	@mkdir -p $(dir $@)
	cp $< $@

lab: $(STAMP) $(OVERRIDES)
	$(BIN)/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser --notebook-dir=labs \
		$(if $(filter 0,$(shell id -u)),--allow-root,)

# The whole suite: lint, the lab_utils unit tests and every notebook under nbval at the smoke
# size, on two workers (--dist loadfile keeps each file, so each notebook's cells, in one worker).
# (The real-browser tests in tests/browser run from `make browser-test`, which CI also runs.)
# One OpenMP thread per process: two workers share two cores, and torch's OpenMP threads
# spin-wait when they outnumber the free cores (lab 1 took 92 s instead of 15 s beside one busy
# process). Ranks started by launch() set their own thread count either way.
TEST_ENV := LAB_SIZE=smoke OMP_NUM_THREADS=1

test: $(STAMP) lint
	$(TEST_ENV) $(BIN)/python -m pytest tests labs --ignore=tests/browser --nbval --nbval-current-env \
		--nbval-sanitize-with tests/notebooks/nbval_sanitize.cfg -p no:cacheprovider -n 2 --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser $(PYTEST_ARGS)

# The edit-run loop: no notebooks, no test marked slow (real multi-process launches), two workers.
quick: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest tests --ignore=tests/browser -m "not slow" -q -p no:cacheprovider \
		-n 2 $(PYTEST_ARGS)

notebooks: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest labs --nbval --nbval-current-env \
		--nbval-sanitize-with tests/notebooks/nbval_sanitize.cfg -p no:cacheprovider $(PYTEST_ARGS)

# Store a notebook's outputs from a real run at the student size (widget state is not saved).
execute: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make execute NB=labs/<NN_lab>/<NN_lab>.ipynb"; exit 2; }
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=900 --ExecutePreprocessor.store_widget_state=False $(NB)

# The instructor copies: each lab with its exercise cells holding its solutions (labs/*/solutions.py).
solutions: $(STAMP)
	$(BIN)/python -m tools.solutions check
	$(BIN)/python -m tools.solutions build --out build/solutions

# Each taught claim's tests, run against a copy of the tree holding plausibly wrong code: every
# mutation must be caught (tools/mutations/ lists them; ONLY="ring cost" runs one, LAB=03 one lab's).
# Slow: the taught-cell mutations each run their lab twice.
mutations: $(STAMP)
	$(BIN)/python -m tools.mutations $(if $(ONLY),--only "$(ONLY)",) $(if $(LAB),--lab $(LAB),)

# Root only (sudo make validate-link, a few minutes): two network namespaces, a veth pair shaped
# with tc tbf, one gloo rank in each; lab 3's overlap model against the measured updates at three
# link speeds. The apparatus lives in tools/validate_link (not installed, not imported by lab_utils);
# it writes the table the lab shows (lab_utils.labs.lab03_ddp.reallink loads it).
validate-link: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m tools.validate_link.run --out lab_utils/labs/lab03_ddp/real_link.json

# One CUDA GPU, at most 8 minutes: the calculator against torch.cuda.max_memory_allocated and the
# memory snapshot's peak (lab 1/2's bert-large setups, lab 8's Llama shapes); a table and
# build/gpu_check.json. Without CUDA it says so and exits 0.
gpu-check: $(STAMP)
	$(BIN)/python -m tools.gpu_check --out build/gpu_check.json

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

# Slide decks (make slides, make slides-pdf) and real-browser tests (make browser-test).
include slides/slides.mk
