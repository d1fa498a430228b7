# tpujob-operator: `make demo` and `make test` do all the set-up on a fresh machine.
#   make deps    install the Debian packages (scripts/install-deps.sh)
#   make tools   build/cache the pinned control plane (e2e/tools/build.sh)
#   make build   configure and compile into build/
#   make test    everything from a fresh machine: packages, Go tools beside the C++ build, unit,
#                end-to-end tests in parallel shards (TPUJOB_E2E_SHARDS), sanitizers, fuzzing,
#                and a table of where the time went (scripts/run-tests.sh)
#   make e2e     only the end-to-end tests, in shards (scripts/e2e.sh)
#   make e2e-dev E2E=FILTER  the end-to-end tests matching a gtest filter against a control plane
#                kept up between runs (scripts/e2e-dev.sh): the edit-test loop
#   make demo    local control plane + operator + a sample TPUJob
#   make sanitize  unit tests under ASan+UBSan, threaded ones under TSan (scripts/sanitize.sh)
#   make fuzz    each libFuzzer target of tests/fuzz for FUZZ_SECONDS (default 30)
#   make bench   benchmarks that print numbers
#   make bench-plot  draw bench's plots again from the last run's output (scripts/bench-plot.py)
#   make bench-slice  only bench's slice recovery section, on a control plane of its own
#   make bench-inplace  only bench's in-place restart section, on a control plane of its own
#   make chaos   the seeded fault campaign, 10 minutes, on a control plane of its own with
#                the real node (scripts/chaos.sh; CHAOS_SEEDS, CHAOS_SECONDS, CHAOS_REAL_NODE)
#   make chaos-selftest  the campaign's checker must catch four deliberately broken operators
#                (scripts/chaos-breaks.sh, patches in e2e/chaos-breaks/)
#   make format  clang-format every C++ file
#   make crd     regenerate crds/ from scripts/crd/ and the pinned Kubernetes OpenAPI
#   make image   the Dockerfile's image, built with buildah from a Debian base made from the apt
#                mirror (no container registry): build/image/tpujob-operator.oci.tar
#                (scripts/build-image.sh)
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CTEST := ctest --test-dir $(BUILD_DIR) --output-on-failure
# Recipes that build Go tools run with a Go new enough for them first on the PATH: the one on the
# PATH, else the pinned toolchain scripts/install-go.sh downloads once and caches (run-tests.sh,
# demo.sh and bench.sh do the same themselves).
WITH_GO = gobin=$$(bash scripts/install-go.sh) && PATH="$$gobin:$$PATH"

.PHONY: all deps tools build bench-tool unit e2e e2e-dev sanitize fuzz test demo bench bench-plot bench-slice bench-inplace chaos chaos-selftest format crd image clean notice-demo notice-test

all: build

deps:
	@bash scripts/install-deps.sh

tools: deps
	@$(WITH_GO) bash e2e/tools/build.sh >/dev/null
	@$(WITH_GO) bash e2e/tools/kwok/build.sh >/dev/null

$(BUILD_DIR)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) -G Ninja

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

unit: build
	$(CTEST) -L unit -j $(JOBS)

e2e: build tools
	@$(WITH_GO) bash scripts/e2e.sh $(BUILD_DIR)

E2E ?=
e2e-dev: build tools
	@$(WITH_GO) bash scripts/e2e-dev.sh $(BUILD_DIR) '$(E2E)'

sanitize: deps
	@bash scripts/sanitize.sh address
	@bash scripts/sanitize.sh thread

FUZZ_SECONDS ?= 30
fuzz: deps
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

# Prerequisites run left to right: the notice comes before the long first build.
notice-demo notice-test:
	@bash scripts/first-run-notice.sh $(@:notice-%=%)

test: notice-test
	@bash scripts/run-tests.sh $(BUILD_DIR)

demo: notice-demo build tools
	@bash scripts/demo.sh $(BUILD_DIR)

# tpujob-bench is not part of the default build (no test needs it).
bench-tool: build
	cmake --build $(BUILD_DIR) -j $(JOBS) --target tpujob-bench

bench: bench-tool tools
	@bash scripts/bench.sh $(BUILD_DIR)

BENCH_OUTPUT ?= $(or $(TPUJOB_BENCH_DIR),/tmp/tpujob-bench).output.txt
bench-plot:
	python3 scripts/bench-plot.py $(BENCH_OUTPUT) --out-dir $(BUILD_DIR)/bench-plots

bench-slice: bench-tool tools
	@bash scripts/bench-slice.sh $(BUILD_DIR)

bench-inplace: bench-tool tools
	@bash scripts/bench-inplace.sh $(BUILD_DIR)

chaos: build tools
	@bash scripts/chaos.sh $(BUILD_DIR)

chaos-selftest: build tools
	@bash scripts/chaos-breaks.sh $(BUILD_DIR)

format:
	@TPUJOB_DEPS=format bash scripts/install-deps.sh
	@find src operator tests e2e -name '*.h' -o -name '*.cpp' | grep -v '/tools/' | xargs clang-format -i

crd:
	@$(WITH_GO) python3 scripts/gen-crd.py

image:
	@BUILD_DIR=$(BUILD_DIR) bash scripts/build-image.sh

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz
