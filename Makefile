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

.PHONY: all tools generate verify-generate build test vet demo dev-up dev-down clean help

all: build

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

tools: ## build the pinned tofu, etcd, Kubernetes and helm binaries from source (cached)
	hack/tools.sh

generate: ## regenerate deepcopy code and CRDs from api/
	$(FULFILLER_TOOLS_BIN)/controller-gen object paths=./api/... crd output:crd:artifacts:config=api/crds

verify-generate: generate ## fail when generated files are not committed
	@git diff --exit-code -- api || (echo "generated files are stale: run make generate and commit"; exit 1)

build: ## build bin/fulfiller
	go build -trimpath -o bin/fulfiller ./cmd/fulfiller

vet: ## go vet and gofmt check
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: tools vet verify-generate ## build the tools, then run every test suite against them
	go test $(GO_TEST_FLAGS) ./...

DEV_DIR ?= .dev

demo: tools build ## run the local environment with a sample workload (see README)
	bin/fulfiller dev demo --dir $(DEV_DIR)

dev-up: tools build ## start the local environment in the background (KUBECONFIG=$(DEV_DIR)/kubeconfig)
	bin/fulfiller dev up --dir $(DEV_DIR)

dev-down: ## stop the local environment
	bin/fulfiller dev down --dir $(DEV_DIR)

clean: ## remove build output (the tools cache stays)
	rm -rf bin
