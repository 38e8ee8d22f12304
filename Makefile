# transit: build, test, fuzz, bench, lint. `make help` lists the targets.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO      ?= go
BIN     := $(CURDIR)/bin
PKGS    ?= ./...

# Version stamped into the binary (see cmd/transit/cli/version.go).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
CLI     := github.com/cloudtransit/transit/cmd/transit/cli
LDFLAGS := -X $(CLI).version=$(VERSION) -X $(CLI).commit=$(COMMIT) -X $(CLI).date=$(DATE)

# Extra flags for go test, e.g. make test GOTESTFLAGS=-race
GOTESTFLAGS ?=
# How much each fuzz target runs: an execution count, not a duration. A
# duration races Go 1.26's fuzz coordinator at the deadline and fails with a
# bare "context deadline exceeded" and no crasher (go.dev/issue/75804).
FUZZTIME ?= 50000x

# Tools, pinned.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# controller-tools v0.17.3 is the one made for k8s.io v0.32 (the bundle's).
CONTROLLER_GEN_VERSION ?= v0.17.3
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
# The S3-compatible server the state store's tests start on loopback
# (versitygw: one Go binary from the module proxy, a posix backend,
# conditional writes; docs/state.md).
VERSITYGW_VERSION ?= v1.8.0
S3_SERVER := $(BIN)/versitygw-$(VERSITYGW_VERSION)

# What the local provider, the Swarm driver and the e2e tests need on the
# host (Debian/Ubuntu package names).
DEPS_PACKAGES := iproute2 iptables openssh-server util-linux docker.io busybox-static curl kcat

# What `make bundle` takes from the build host's Debian packages: the
# container runtime, the CNI plugins, and the iptables, conntrack and
# busybox that go into kube-proxy's and flannel's images.
BUNDLE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack busybox-static netbase
# Where `make bundle` writes the offline Kubernetes bundle.
BUNDLE_DIR ?= $(CURDIR)/build/bundle

# Where `make demo` keeps its working directory (state, cluster key).
DEMO_DIR := $(CURDIR)/demo
# Where `make demo-kubernetes` keeps its working directory.
DEMO_K8S_DIR := $(CURDIR)/demo-kubernetes

.PHONY: generate help build test test-unit test-race s3-server fuzz bench bench-paper bench-relations bench-autoscale bench-streams lint clean clean-host deps bundle-deps bundle demo demo-destroy demo-kubernetes demo-kubernetes-destroy

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/transit with version information, bin/transit-mesh (the node mesh, for Linux nodes) and bin/cloudsim (the cloud emulator)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/transit ./cmd/transit
	GOOS=linux $(GO) build -o $(BIN)/transit-mesh ./cmd/transit-mesh
	$(GO) build -o $(BIN)/cloudsim ./cmd/cloudsim

# Each test binary's timeout, at least twice its time here (docs/testing.md,
# "How long make test takes"): a slow machine fails with a clear message, not a panic in the
# middle of a cluster. The e2e suite keeps the last minutes of its own for
# cleaning up.
TEST_TIMEOUT ?= 35m
E2E_TIMEOUT  ?= 50m
# The packages that take minutes, slowest first: go test starts packages
# in the order given, two at a time, and these started last (in the
# alphabet's order) were the tail of make test, the machine idle
# meanwhile. The two conformance suites take the host's lock in turn: a
# long package goes between them, not a slot spent waiting.
SLOW_FIRST := platforms/kubernetes controllers/streams controllers/relations platforms/swarm \
	drivers/local drivers/gce drivers/aws controllers/streams/sidecar cloudsim/localnodes control

# What failed, printed again at the end of make test, where a log that
# keeps only its tail (CI's) still shows it: each failing test with the
# lines it logged after it, and every panic and failed package.
FAILED_AWK := /^ok[[:space:]]/ {n = 0} /^[[:space:]]*--- FAIL/ {n = 13} /^panic: |^FAIL[[:space:]]/ && n == 0 {print} n > 0 {print; n--}

# Test binaries and the commands tests build are linked without DWARF
# (-ldflags=-w, through GOFLAGS so that the builds inside tests get it
# too): a third less linking, about 25 s of CPU per make test while the
# e2e's clusters start; panics still print their stacks.
TEST_GOFLAGS := -ldflags=-w $(GOFLAGS)

# Where the e2e suite writes its groups' times; make test prints them.
E2E_TIMES := $(CURDIR)/build/e2e-times.txt

# The e2e package is the longest: it starts at once, beside the others,
# its output printed when it ends. The others run in a cpu cgroup of half
# the default weight (cgroup v1, as root; elsewhere as they are): the
# scheduler weighs every local node together (their cgroups are under
# transit/) as one, and the others' test binaries, compilers and API
# servers, a session of their own, as another, so the e2e's nodes, the
# long pole, had the CPU half the time those wanted it. (A lower nice
# level changes nothing: it only counts within a session's autogroup.)
MAKE_TEST_CGROUP := /sys/fs/cgroup/cpu/transit-make-test
# The bundle is brought up to date once, before the packages, and handed
# to them as TRANSIT_BUNDLE (taken as it is): each test binary that needs
# it (the e2e, controllers and Kubernetes platform tests; no other package
# waits for a build) checked it again otherwise, nine, about 6 s of CPU
# each while the clusters start. If it does not build, the tests that
# need it say why.
test: $(S3_SERVER) ## Run all tests; e2e tests run only as root
	@rm -f $(E2E_TIMES); mkdir -p $(dir $(E2E_TIMES))
	@began=$$SECONDS; pkgs=$$($(GO) list $(PKGS)); bundle=$${TRANSIT_BUNDLE:-}; log=$$(mktemp); \
	if [ -n "$$bundle" ]; then echo "TRANSIT_BUNDLE=$$bundle: the tests take that bundle as it is"; \
	elif ! grep -qE '/(e2e|controllers(/.*)?|platforms/kubernetes)$$' <<< "$$pkgs"; then :; \
	elif $(GO) run ./cmd/transit-bundle -repo $(CURDIR) -out $(BUNDLE_DIR) > $$log 2>&1; then tail -n 1 $$log; bundle=$(BUNDLE_DIR); \
	else echo "make test: the bundle did not build (the tests that need it build it again and say why):"; tail -n 5 $$log; fi; \
	rm -f $$log; export TRANSIT_BUNDLE=$$bundle; [ -n "$$bundle" ] || unset TRANSIT_BUNDLE; \
	e2e=$$(grep -x 'github.com/cloudtransit/transit/e2e' <<< "$$pkgs" || true); \
	rest=$$(grep -vx 'github.com/cloudtransit/transit/e2e' <<< "$$pkgs" || true); \
	slow=$$(for p in $(SLOW_FIRST); do grep -x "github.com/cloudtransit/transit/$$p" <<< "$$rest" || true; done); \
	rest=$$(printf '%s\n' $$slow; grep -vxF "$$slow" <<< "$$rest" || true); \
	out=$$(mktemp); restout=$$(mktemp); trap 'rm -f $$out $$restout' EXIT; e2e_rc=0; rest_rc=0; \
	cg=; if [ "$$(id -u)" = 0 ] && [ -f $(dir $(MAKE_TEST_CGROUP))cpu.shares ] && mkdir -p $(MAKE_TEST_CGROUP) && \
		echo 512 > $(MAKE_TEST_CGROUP)/cpu.shares; then cg=$(MAKE_TEST_CGROUP); fi; \
	if [ -n "$$e2e" ]; then \
		GOFLAGS='$(TEST_GOFLAGS)' TRANSIT_S3_SERVER=$(S3_SERVER) TRANSIT_E2E_TIMES=$(E2E_TIMES) $(GO) test -timeout $(E2E_TIMEOUT) $(GOTESTFLAGS) $$e2e > $$out 2>&1 & e2e_pid=$$!; \
	fi; \
	if [ -n "$$rest" ]; then \
		{ ( [ -z "$$cg" ] || echo $$BASHPID > $$cg/cgroup.procs; \
			GOFLAGS='$(TEST_GOFLAGS)' TRANSIT_S3_SERVER=$(S3_SERVER) exec $(GO) test -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) $$rest ) 2>&1 | tee $$restout; } || rest_rc=$$?; \
		rest_took=$$(( SECONDS - began )); \
	fi; \
	if [ -n "$$e2e" ]; then wait $$e2e_pid || e2e_rc=$$?; cat $$out; fi; \
	[ -z "$$cg" ] || rmdir $$cg 2>/dev/null || true; \
	if [ -s $(E2E_TIMES) ]; then echo; cat $(E2E_TIMES); fi; \
	failed=$$(awk '$(FAILED_AWK)' $$restout $$out | head -n 300 || true); \
	if [ -n "$$failed" ]; then printf '\nwhat failed (again):\n%s\n' "$$failed"; fi; \
	[ -z "$$rest" ] || echo "packages other than e2e (built and run beside it): $$(( rest_took / 60 ))m$$(( rest_took % 60 ))s"; \
	echo "make test: $$(( (SECONDS - began) / 60 ))m$$(( (SECONDS - began) % 60 ))s"; \
	[ $$e2e_rc = 0 ] && [ $$rest_rc = 0 ]

test-unit: $(S3_SERVER) ## Run unit tests only (go test -short), no root needed
	TRANSIT_S3_SERVER=$(S3_SERVER) $(GO) test -short $(GOTESTFLAGS) $(PKGS)

s3-server: $(S3_SERVER) ## Install the S3-compatible server the state store's tests run (versitygw) into bin/

$(S3_SERVER):
	@echo "installing versitygw $(VERSITYGW_VERSION) into $(BIN)"
	cd / && GOBIN=$(BIN)/.install $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv $(BIN)/.install/versitygw $@

test-race: ## Run the control loop's tests (-short) under the race detector
	$(GO) test -race -short ./control

fuzz: ## Run every Fuzz target for FUZZTIME executions each (default 50000x)
	@targets=$$($(GO) test -list '^Fuzz' $(PKGS) \
		| awk '/^Fuzz/ {names[n++] = $$1; next} /^ok/ {for (i = 0; i < n; i++) print $$2, names[i]; n = 0}'); \
	if [ -z "$$targets" ]; then echo "no fuzz targets"; exit 0; fi; \
	while read -r pkg target; do \
		echo "--- fuzz $$pkg $$target for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) "$$pkg" </dev/null; \
	done <<< "$$targets"

# install-packages installs the Debian packages named in $(1) that are
# missing. Installs here sometimes fail half-way: it finishes what dpkg
# started and tries once more.
define install-packages
	@[ "$$(id -u)" = 0 ] || { echo "$@ installs packages: run it as root (sudo make $@)"; exit 1; }
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "packages present: $(1)"; exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -q; \
	if ! apt-get install -y -q $$missing; then \
		echo "install failed; finishing what dpkg started and retrying once"; \
		dpkg --configure -a || true; apt-get update -q; apt-get install -y -q $$missing; \
	fi
endef

deps: ## (root) Install the host packages the local provider and the tests need
	$(call install-packages,$(DEPS_PACKAGES))

bundle-deps: ## (root) Install the Debian packages `make bundle` takes binaries from
	$(call install-packages,$(BUNDLE_PACKAGES))

bundle: ## Build the offline Kubernetes bundle into BUNDLE_DIR (cached: seconds when nothing changed)
	$(GO) run ./cmd/transit-bundle -repo $(CURDIR) -out $(BUNDLE_DIR)

demo: deps build ## (root) Bring up the example Swarm on local nodes, print its status
	mkdir -p $(DEMO_DIR)
	install -m 644 cluster.example.json $(DEMO_DIR)/cluster.json
	install -m 644 districts.example.json $(DEMO_DIR)/districts.json
	cd $(DEMO_DIR) && $(BIN)/transit apply --auto-approve
	cd $(DEMO_DIR) && $(BIN)/transit status
	@echo
	@echo "The Swarm runs on local nodes. Look around:  cd demo && sudo ../bin/transit status"
	@echo "Tear it down:                                sudo make demo-destroy  (or: cd demo && sudo ../bin/transit destroy)"

demo-destroy: ## (root) Destroy the demo Swarm
	cd $(DEMO_DIR) && $(BIN)/transit destroy --auto-approve

demo-kubernetes: deps bundle-deps bundle build ## (root) Bring up the example Kubernetes cluster on local nodes, print its status
	mkdir -p $(DEMO_K8S_DIR)
	install -m 644 examples/kubernetes/cluster.json $(DEMO_K8S_DIR)/cluster.json
	install -m 644 examples/kubernetes/districts.json $(DEMO_K8S_DIR)/districts.json
	cd $(DEMO_K8S_DIR) && TRANSIT_BUNDLE=$(BUNDLE_DIR) $(BIN)/transit apply --auto-approve
	cd $(DEMO_K8S_DIR) && $(BIN)/transit status
	@echo
	@echo "Kubernetes runs on local nodes. Use it with kubectl (the bundle has one):"
	@echo "  cd demo-kubernetes && sudo ../bin/transit kubeconfig > kubeconfig && $(BUNDLE_DIR)/bin/kubectl --kubeconfig kubeconfig get nodes"
	@echo "Tear it down:  sudo make demo-kubernetes-destroy"

demo-kubernetes-destroy: ## (root) Destroy the demo Kubernetes cluster
	cd $(DEMO_K8S_DIR) && $(BIN)/transit destroy --auto-approve

bench: $(S3_SERVER) ## Run benchmarks (no tests) and print the results (bench-paper and bench-relations apart)
	TRANSIT_S3_SERVER=$(S3_SERVER) $(GO) test -run '^$$' -bench . -skip 'BenchmarkPaper|BenchmarkPropagation|BenchmarkRelations|BenchmarkSidecarLatency|BenchmarkUpgrade|BenchmarkGC|BenchmarkAutoscale' -benchmem $(PKGS)

PAPER_SCALE ?= 0.1
bench-paper: ## (root) Replay the paper's experiments E1-E5 on emulated clouds; table, JSON and SVG in build/paper
	TRANSIT_PAPER_SCALE=$(PAPER_SCALE) TRANSIT_PAPER_OUT=$(CURDIR)/build/paper $(GO) test -run '^$$' -bench BenchmarkPaper -benchtime 1x -timeout 150m ./e2e

RELATIONS_RUNS ?= 20
bench-relations: ## (root) The relations controller: provider change → consumers' templates (API server), and → N consumers running on a local cluster vs a ConfigMap baseline; table in build/relations
	$(GO) test -run '^$$' -bench BenchmarkPropagation -benchtime 5x -timeout 30m ./controllers/relations
	TRANSIT_RELATIONS_RUNS=$(RELATIONS_RUNS) TRANSIT_RELATIONS_OUT=$(CURDIR)/build/relations $(GO) test -run '^$$' -bench BenchmarkRelations -benchtime 1x -timeout 300m ./e2e

STREAMS_RUNS ?= 20
bench-autoscale: ## (root) transit autoscale on a local Swarm in two districts priced differently: seconds to the first new node and to every task running, where the nodes went, seconds until idle nodes are gone
	$(GO) test -run '^$$' -bench BenchmarkAutoscale -benchtime 1x -timeout 30m -v ./e2e

bench-streams: ## The streams controller: sidecar latency, upgrades and GC (the broker process, real sidecars), scaling (simulated; and, as root, real pods on a local cluster); tables in build/streams
	$(GO) test -run '^$$' -bench BenchmarkSidecarLatency -benchtime 1x -timeout 60m ./controllers/streams/sidecar
	TRANSIT_STREAMS_RUNS=$(STREAMS_RUNS) TRANSIT_STREAMS_OUT=$(CURDIR)/build/streams $(GO) test -run '^$$' -bench 'BenchmarkUpgrade|BenchmarkGC' -benchtime 1x -timeout 60m ./controllers/streams
	$(GO) test -run '^$$' -bench BenchmarkScaling ./controllers/streams/scale
	if [ "$$(id -u)" = 0 ]; then $(GO) test -run '^$$' -bench BenchmarkStreamsScalingOnCluster -benchtime 1x -timeout 40m -v ./e2e; fi

generate: $(CONTROLLER_GEN) ## Write the controllers' deepcopy code and CRDs (committed; CI checks they are current)
	$(CONTROLLER_GEN) object crd paths=./controllers/relations/api/... output:crd:dir=./controllers/relations/config/crd
	$(CONTROLLER_GEN) object crd paths=./controllers/streams/api/... output:crd:dir=./controllers/streams/config/crd

$(CONTROLLER_GEN):
	@echo "installing controller-gen $(CONTROLLER_GEN_VERSION) into $(BIN)"
	cd / && GOBIN=$(BIN)/.install $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/.install/controller-gen $@

lint: $(GOLANGCI_LINT) ## Run go vet and golangci-lint
	$(GO) vet $(PKGS)
	$(GOLANGCI_LINT) run $(PKGS)

$(GOLANGCI_LINT):
	@echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into $(BIN)"
	GOBIN=$(BIN)/.install $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.install/golangci-lint $@
	rmdir $(BIN)/.install

clean: ## Remove build output and installed tools
	rm -rf $(BIN)

clean-host: ## (root) Remove every namespace, bridge, veth, chain, cgroup, process and record transit left on this host, after asking (YES=1: without)
	$(GO) run ./cmd/transit-clean-host $(if $(filter 1,$(YES)),-y)
