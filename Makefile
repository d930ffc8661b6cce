# mpcomm — the two commands that matter on a fresh machine:
#   make demo   installs what is missing, builds, and runs the main job (compare, then a short train)
#   make test   installs what is missing, builds, and runs every test
# Options: BUILD_TYPE=Debug, SANITIZE=1 (AddressSanitizer + UBSan, in build-asan/), JOBS=N.
# Also: make install [PREFIX=/opt/mpcomm] (default /usr/local), make deb (build-deb/mpcomm_*.deb; docs/install.md),
# make wheel (build-wheel/mpcomm-*.whl for the PyTorch 2.x of PYTHON, default the cached one; docs/torch.md).

BUILD_TYPE ?= Release
SANITIZE ?= 0
JOBS ?= $(shell nproc)
ifeq ($(SANITIZE),1)
BUILD ?= build-asan
else
BUILD ?= build
endif
CLI := $(BUILD)/mpcomm

.PHONY: all deps configure build test demo install deb wheel clean

all: build

deps:
	@scripts/setup-deps

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DMPCOMM_SANITIZE=$(if $(filter 1,$(SANITIZE)),ON,OFF) \
	  $(if $(TORCH2_PYTHON),-DMPCOMM_TORCH2_PYTHON=$(TORCH2_PYTHON)) >/dev/null

# The tests build the PyTorch 2.x backend too, against PyPI's torch in a virtual environment made once and
# cached (scripts/torch2-venv; without PyPI they go on without it, and say so).
test: TORCH2_PYTHON = $(shell scripts/torch2-venv || echo "make test: no PyTorch 2.x environment, its tests are left out" >&2)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 900

demo: build
	$(CLI) info
	@echo
	$(CLI) compare --report out/report --json out/results.jsonl
	@echo
	$(CLI) train -n 4 --tp 2 --pp 2 --micro-batches 4 --backend all --steps 20 --loss-log out/train-loss.jsonl
	@echo
	@echo "report: out/report/report.md and out/report/*.png"

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

# The Debian package is built on its own, without CUDA (docs/install.md says why), and only what it holds.
deb: deps
	@cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DMPCOMM_WITH_CUDA=OFF -DMPCOMM_WITH_TORCH=OFF \
	  -DMPCOMM_BUILD_TESTS=OFF -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
	@cmake --build build-deb -j $(JOBS) --target mpcomm_shared mpcomm_cli
	cd build-deb && cpack -G DEB

# A wheel of the package mpcomm (libmpcomm inside) for the PyTorch 2.x of PYTHON, as `pip install
# --no-build-isolation .` builds it (pyproject.toml).
wheel: PYTHON ?= $(shell scripts/torch2-venv)
wheel: deps
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PYTHON) -m pip wheel --no-build-isolation --no-deps -w build-wheel .

clean:
	rm -rf build build-asan build-deb build-wheel
