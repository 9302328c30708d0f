# patch-agent — `make help` lists the targets. `make test` is what CI runs (.ci/run).
SHELL := /usr/bin/env bash
GO    ?= go
BIN   := bin/patch-agent
PKGS  := ./...
# Emulator binaries are built once per machine into a cache outside the repository.
TESTBIN_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/patch-agent/testbin

.PHONY: help build image release test unit e2e moto demo lint bench testbin clean mutants mutants-all soak

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_-]+:.*## /{printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The production binary: static, no demo or simulated account (-tags nodemo), stamped from git (scripts/version.sh).
build: ## build bin/patch-agent (the production binary: static, no demo, version from git)
	eval "$$(scripts/version.sh)" && CGO_ENABLED=0 $(GO) build -trimpath -tags nodemo -ldflags "-s -w $$LDFLAGS" -o $(BIN) ./cmd/patch-agent

IMAGE ?= bin/image/oci
image: ## build the OCI image (linux/amd64, linux/arm64) into bin/image/oci without Docker; push: crane push --index
	scripts/image.sh $(IMAGE)

# A release from the v* tag at HEAD, offline (module cache and image tools only); scripts/release.sh says what
# it builds and when it refuses. RELEASE_PLATFORMS narrows the platforms (tests build linux/amd64 only).
release: ## build a release from the v* tag at HEAD, offline: archives for linux/darwin amd64/arm64, SHA256SUMS, SBOM, image, in bin/release/<version>
	scripts/release.sh

testbin: ## build the emulators and tools the tests need (kumo, kube-apiserver + etcd, ociimage + crane), once per machine
	@scripts/ensure-kumo.sh >/dev/null
	@scripts/ensure-kube.sh >/dev/null
	@scripts/ensure-ociimage.sh >/dev/null

# pinned npm cfn-lint (package.json / package-lock.json) for internal/cfntest and `make lint`
node_modules/.bin/cfn-lint: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

# moto_server (moto 5.2.1) is a Python package: looked up, never built; missing fails under CI=true.
moto: ## check that moto_server (the contract and end-to-end tests' emulator) is there
	@scripts/ensure-moto.sh >/dev/null

# The environment of every test run: the emulators' places (built or looked up once per machine) and the image.
TEST_ENV = PATCH_AGENT_KUMO=$$(scripts/ensure-kumo.sh) PATCH_AGENT_MOTO=$$(scripts/ensure-moto.sh) \
	KUBEBUILDER_ASSETS=$$(scripts/ensure-kube.sh) PATCH_AGENT_IMAGE=$(abspath $(IMAGE))
# The scenario suites: the agent driven against the simulated account, judged by the invariant checker.
SCENARIO_PKGS := ./internal/agent/ ./internal/demo/ ./internal/engine/ ./internal/eksupgrade/ ./internal/testworld/...
SCENARIO_RE   := /internal/(agent|demo|engine|eksupgrade|e2e|testworld(/.*)?)$$

# Each group is timed (scripts/timed.sh): .ci/run's summary lists them. A package may take longer than go
# test's default 10 minutes on a loaded 2-core machine (the crash matrices of internal/agent): 30 minutes each.
test: node_modules/.bin/cfn-lint ## all tests: integration, contract and end-to-end tests on the emulators, and the image (CI runs this)
	@scripts/timed.sh "test: testbin" $(MAKE) --no-print-directory testbin moto
	@scripts/timed.sh "test: image" $(MAKE) --no-print-directory image
	@scripts/timed.sh "test: scenarios" env $(TEST_ENV) $(GO) test -count=1 -timeout 30m $(SCENARIO_PKGS)
	@scripts/timed.sh "test: other packages" env $(TEST_ENV) $(GO) test -count=1 -timeout 30m $$($(GO) list $(PKGS) | grep -v -E '$(SCENARIO_RE)')
	@scripts/timed.sh "test: e2e" $(MAKE) --no-print-directory e2e

e2e: testbin moto build ## the real binary rolls an ECS group by instance refresh on the served simulated account, whole and killed mid-call; on moto (no instance refresh in moto) it prepares the refresh up to where moto ends
	PATCH_AGENT_KUMO=$$(scripts/ensure-kumo.sh) PATCH_AGENT_MOTO=$$(scripts/ensure-moto.sh) PATCH_AGENT_E2E_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -count=1 -timeout 10m -v -run 'TestE2E' ./internal/e2e

unit: ## tests that need no emulator (integration tests skip unless CI=true)
	$(GO) test -count=1 $(PKGS)

demo: ## run the real agent against a simulated account: an ECS group and an EKS node group rolled to a new AMI
	$(GO) run ./cmd/patch-agent demo

lint: node_modules/.bin/cfn-lint ## gofmt, go vet, the packages' import rules and cfn-lint of the CloudFormation template
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags nodemo ./cmd/patch-agent/ # the production binary's build, tests included
	$(GO) test -count=1 -run 'TestProductImportRules|TestImportRulesRejectAForbiddenImport' ./tools/conventions # docs/architecture.md, "Packages"
	scripts/cfn-lint.sh

bench: ## measurements, fleet scenario 1,000 x 20 included: rewrites the tracked bench-results.json and docs/performance.md (~10 minutes on an idle machine, plus ~8 CPU-minutes to build kumo the first time; PATCH_AGENT_FLEET=20x5 for a ~3 minute run, whose files are not for committing)
	PATCH_AGENT_FLEET=$${PATCH_AGENT_FLEET:-1000x20} PATCH_AGENT_KUMO=$$(scripts/ensure-kumo.sh) PATCH_AGENT_BENCH=1 $(GO) test -count=1 -run 'TestBenchmarks|TestIaCThroughput' -v -timeout 45m ./internal/bench
	$(GO) test -run='^$$' -bench=. -benchmem ./internal/events

mutants: ## the curated safety mutants (what CI runs): each deliberate bug must make the test its mutant names fail (docs/testing.md)
	scripts/mutants.sh

mutants-all: ## every safety mutant of testdata/mutants, not only the curated set (a deeper run, ~1 hour on 2 cores)
	scripts/mutants.sh --all

SOAK_SEEDS ?= 20
soak: testbin ## the long form of the randomized runs over $(SOAK_SEEDS) seeds: the fault matrix (20 % faults, its call ratio asserted), rollouts by instance refresh beside a random autoscaler and an operator (every invariant asserted), and the surge engine under other writers (a report, bin/soak-writers.md)
	@mkdir -p bin
	set -o pipefail; PATCH_AGENT_SEEDS=$(SOAK_SEEDS) PATCH_AGENT_SOAK_REPORT=$(CURDIR)/bin/soak-writers.md \
		$(GO) test -count=1 -timeout 60m -v -run 'TestFaultMatrix|TestRolloutsBesideARandomAutoscalerAndAnOperatorHoldEveryInvariant|TestC24Refresh|TestRefresh' ./internal/agent/ 2>&1 \
		| tee bin/soak.log | grep -E -e '--- (PASS|FAIL)' -e 'faults_test.go' -e '^(ok|FAIL)'
	cat bin/soak-writers.md

clean: ## remove build output
	rm -rf bin
