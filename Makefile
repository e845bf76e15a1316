# karpenter v1.15.0 needs Go >= 1.26.9; the go command fetches this toolchain through the
# module proxy. Every target and script runs with it.
export GOTOOLCHAIN := go1.26.9
export GOWORK := off

FULFILLER_CACHE ?= $(HOME)/.cache/fulfiller
export FULFILLER_CACHE
export FULFILLER_TOOLS_BIN := $(FULFILLER_CACHE)/tools/bin
# The machine's environment points tofu at a CLI config that does not exist.
unexport TF_CLI_CONFIG_FILE

GO_TEST_FLAGS ?= -count=1 -timeout=30m
# The unit and controller tests run with the race detector; the end-to-end, chart, image and
# benchmark suites under test/ run without it (their time goes to tofu, machines and builds).
RACE_PACKAGES := ./api/... ./cmd/... ./hack/... ./internal/...

.PHONY: all tools image-tools bench-tools generate chart-crds api-docs docs-check verify-generate build test test-unit vet lint bench soak demo demo-hcloud dev-up dev-down clean help chart-lint karpenter-crds image

all: build

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

tools: ## build the pinned tofu, etcd, Kubernetes, helm and golangci-lint binaries from source (cached)
	hack/tools.sh

bench-tools: ## build what only the benchmarks use: Karpenter's kwok provider and the kwok controller (cached)
	TOOLS="karpenter-kwok kwok" hack/tools.sh

KUBEVIRT_CRDS := internal/providers/kubevirt/standin/crds

generate: ## regenerate deepcopy code and CRDs from api/, the CRD chart's CRDs (the fulfiller's and Karpenter core's), the API reference (docs/reference) and the test environment's KubeVirt CRDs
	$(FULFILLER_TOOLS_BIN)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/... crd output:crd:artifacts:config=api/crds
	$(MAKE) --no-print-directory chart-crds karpenter-crds
	$(MAKE) --no-print-directory api-docs
	go run ./$(KUBEVIRT_CRDS)/gen -out $(KUBEVIRT_CRDS)

CHART := charts/fulfiller
CRD_CHART := charts/fulfiller-crd

chart-crds: ## write the fulfiller's generated CRDs (api/crds) into the CRD chart (charts/fulfiller-crd/templates)
	go run ./hack/crdchart -out $(CRD_CHART)/templates -fulfiller api/crds

karpenter-crds: ## write the CRDs of the Karpenter core the binary embeds (go.mod's sigs.k8s.io/karpenter) into the CRD chart
	go run ./hack/crdchart -out $(CRD_CHART)/templates -karpenter -karpenter-version "$$(go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"

API_DOCS := docs/reference

api-docs: ## generate the API reference docs/reference/api.md from api/v1alpha1 (crd-ref-docs)
	$(FULFILLER_TOOLS_BIN)/crd-ref-docs --config hack/crd-ref-docs.yaml --source-path api/v1alpha1 \
		--renderer markdown --output-path $(API_DOCS)/api.md --log-level ERROR

docs-check: ## check that every relative link and named path in the README and docs/ resolves
	go test -count=1 ./test/docs/

verify-generate: generate ## fail when generated files (api/, the CRD chart's CRDs, the API reference) are not committed
	@git diff --exit-code -- api $(CRD_CHART)/templates $(API_DOCS) $(KUBEVIRT_CRDS) || (echo "generated files are stale: run make generate and commit"; exit 1)
	@out=$$(git status --porcelain --untracked-files=all -- api $(CRD_CHART)/templates $(API_DOCS) $(KUBEVIRT_CRDS)); if [ -n "$$out" ]; then \
		echo "generated files are not committed:"; echo "$$out"; exit 1; fi

chart-lint: ## helm lint --strict both charts (the chart's Go test also does, and installs them into a real API server)
	$(FULFILLER_TOOLS_BIN)/helm lint --strict $(CRD_CHART) $(CHART)

# The version builds carry (hack/version.sh): VERSION at its release tag, else a pre-release
# of it named after the commit.
VERSION ?= $(shell hack/version.sh)
LDFLAGS := -X main.version=$(VERSION)

# The image is built for both architectures; tofu and the providers of the one this machine is
# not are cross-compiled by hack/tools.sh into a folder of their own.
IMAGE_OUT ?= bin/image
IMAGE_REPOSITORY ?= ghcr.io/fulfiller-sh/fulfiller
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_OTHER_ARCH := $(if $(filter arm64,$(shell go env GOARCH)),amd64,arm64)

image-tools: ## cross-compile tofu and the providers for the image's other architecture (cached, like make tools)
	TOOLS="tofu provider-hcloud provider-kubectl" TOOLS_ARCH=$(IMAGE_OTHER_ARCH) hack/tools.sh

image: tools image-tools ## build the image without a container engine: $(IMAGE_OUT)/oci (OCI layout, linux/amd64 and linux/arm64), a docker-load tarball, a CycloneDX SBOM and a file list per platform (docs/image.md)
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) go -C hack/image run . -root "$(CURDIR)" -out "$(abspath $(IMAGE_OUT))" \
		-tools "$(FULFILLER_CACHE)/tools" -version "$(VERSION)" -repository "$(IMAGE_REPOSITORY)" -platforms "$(IMAGE_PLATFORMS)"

build: ## build bin/fulfiller (the image's controller and runner), bin/fulfiller-dev (that plus dev and sim), bin/fulfiller-runner and bin/fulfiller-sim (the runner alone, the simulated machine alone)
	go build -trimpath -ldflags "$(LDFLAGS)" -o bin/ ./cmd/fulfiller ./cmd/fulfiller-dev ./cmd/fulfiller-runner ./cmd/fulfiller-sim

vet: ## go vet (the project and the image builder), gofmt and license header check
	go vet ./...
	go -C hack/image vet ./...
	go -C hack/promql vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@hack/check-headers.sh

lint: ## golangci-lint with .golangci.yaml (goimports, govet, staticcheck, errorlint, errcheck, ...) on the project and the image builder; builds the pinned linter first (cached)
	@TOOLS=golangci-lint hack/tools.sh >/dev/null
	$(FULFILLER_TOOLS_BIN)/golangci-lint run --allow-parallel-runners ./...
	cd hack/image && $(FULFILLER_TOOLS_BIN)/golangci-lint run --allow-parallel-runners ./...

test-unit: ## the inner loop, in seconds: the tests that need no tools and no control plane (hack/unit-packages.sh lists them)
	pkgs=$$(hack/unit-packages.sh) && go test -count=1 $$pkgs

test: tools vet lint verify-generate ## build the tools, then run every test suite against them, the unit and controller tests with -race (test/image builds the image; hack/test.sh builds its arm64 tools in the background)
	GO_TEST_FLAGS='$(GO_TEST_FLAGS)' RACE_PACKAGES='$(RACE_PACKAGES)' SOAK_DURATION=$(SOAK_CI_DURATION) hack/test.sh

# make soak: random churn with invariants on a local environment of its own (test/soak);
# make test runs SOAK_CI_DURATION of it beside the other suites under test/ (hack/test.sh; go
# test runs two packages at a time on two cores; the end-to-end suite is the longest).
SOAK_DURATION ?= 1h
SOAK_SEED ?=
SOAK_CI_DURATION ?= 2m30s
SOAK_REPORT ?=

soak: tools ## churn the local environment at random for SOAK_DURATION (1h) and check its invariants every 10 s (SOAK_SEED= replays a run, SOAK_REPORT= writes the report to a file)
	SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) SOAK_REPORT=$(abspath $(SOAK_REPORT)) \
		go test -count=1 -timeout=0 -v -run '^TestSoak$$' ./test/soak/

BENCH ?= .
bench: tools bench-tools ## run the benchmarks (test/bench): bursts against Karpenter's kwok provider, one run's phases, runner overhead, 20 claims through Jobs, Hetzner Cloud API requests per node (BENCH=, BENCH_CASES=, BENCH_ROUNDS=, BENCH_BASELINE_REV=, BENCH_IDLE=, BENCH_HCLOUD_CREATE=)
	go test -run '^$$' -bench '$(BENCH)' -benchtime=1x -timeout=180m -v ./test/bench/

DEV_DIR ?= .dev

demo: tools build ## run the local environment with a sample workload (see docs/development.md)
	bin/fulfiller-dev dev demo --dir $(DEV_DIR)

demo-hcloud: tools build ## the same demo on modules/hetzner-cloud and the real hcloud provider, against the Hetzner Cloud API stand-in
	bin/fulfiller-dev dev demo --hcloud --dir $(DEV_DIR)

dev-up: tools build ## start the local environment in the background (KUBECONFIG=$(DEV_DIR)/kubeconfig)
	bin/fulfiller-dev dev up --dir $(DEV_DIR)

dev-down: build ## stop the local environment
	bin/fulfiller-dev dev down --dir $(DEV_DIR)

clean: ## remove build output (the tools cache stays)
	rm -rf bin
