# mpcomm — the two commands that matter on a fresh machine:
#   make demo   installs what is missing, builds, and runs the main job (compare, then a short train)
#   make test   installs what is missing, builds, and runs every test
# Options: BUILD_TYPE=Debug, SANITIZE=1 (AddressSanitizer + UBSan, in build-asan/), JOBS=N.
# Also: make install [PREFIX=/opt/mpcomm] (default /usr/local).

BUILD_TYPE ?= Release
SANITIZE ?= 0
JOBS ?= $(shell nproc)
ifeq ($(SANITIZE),1)
BUILD ?= build-asan
else
BUILD ?= build
endif
CLI := $(BUILD)/mpcomm

.PHONY: all deps configure build test demo install clean

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

clean:
	rm -rf build build-asan
