# Two commands for a new user: `make demo` (run the whole cluster locally) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test lint video proto clean

setup: $(STAMP)

$(STAMP): pyproject.toml proto/cnnvideo.proto
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch torchvision
	$(PY) -m pip install -q -e '.[dev,fast,ort]'
	$(PY) -m cnnvideo.rpc.generate
	touch $(STAMP)

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
