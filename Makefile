# orgmem: `make demo` sets up and serves the synthetic organization; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(VENV)/bin/pip
DATA   ?= demo-data
PORT   ?= 8080

.PHONY: venv demo serve test test-unit bench-pipeline schemas clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch that lies on these machines; a bare requirement would pull CUDA.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[test,bench]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(VENV)/bin/orgmem demo --data $(DATA) --port $(PORT)

serve: venv
	$(VENV)/bin/orgmem serve --data $(DATA) --port $(PORT)

test: venv
	$(PY) -m pytest -q

test-unit: venv
	$(PY) -m pytest -q tests/unit

bench-pipeline: venv
	$(PY) bench/pipeline.py

schemas: venv
	$(PY) -m schemas.export

clean:
	rm -rf $(VENV) demo-data orgmem-data bench/out
