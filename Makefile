# mpcomm — the two commands that matter on a fresh machine:
#   make demo   installs what is missing, builds, and runs the main job (compare, then a short train)
#   make test   installs what is missing, builds, and runs every test
# Options: BUILD_TYPE=Debug, SANITIZE=1 (AddressSanitizer + UBSan, in build-asan/), JOBS=N.
# Also: make install [PREFIX=/opt/mpcomm] (default /usr/local), make deb (build-deb/mpcomm_*.deb; docs/install.md).

BUILD_TYPE ?= Release
SANITIZE ?= 0
JOBS ?= $(shell nproc)
ifeq ($(SANITIZE),1)
BUILD ?= build-asan
else
BUILD ?= build
endif
CLI := $(BUILD)/mpcomm

.PHONY: all deps configure build test demo install deb clean

all: build

deps:
	@scripts/setup-deps

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DMPCOMM_SANITIZE=$(if $(filter 1,$(SANITIZE)),ON,OFF) >/dev/null

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

clean:
	rm -rf build build-asan build-deb
