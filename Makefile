# dlock developer and CI entry points. Targets:
#   make deps   - install missing system programs (redis-server, redis-tools,
#                 mariadb-server, postgresql, chromium); as root, with apt-get
#   make deps-redis - redis-server and redis-tools only (what make bench needs)
#   make test   - deps, go vet, staticcheck, race tests, then install-test
#                 (what .ci/run runs)
#   make staticcheck - staticcheck of every module (installs the pinned
#                 version through the module proxy when it is missing)
#   make install-test - go install of the CLI at the next release's version
#                 from a temporary clone, offline (.ci/install-test.sh); also
#                 fails if building the modules changes a tracked file
#   make test-fips - the library under GODEBUG=fips140=only: TestFIPS140Only
#                 (part of make test) runs a lock cycle in a child process
#                 in that mode against a private redis-server
#   make bench  - run the benchmark program (separate module in bench/);
#                 its files go to bench/out/ (ignored by git)
#   make bench-results - regenerate the committed bench/RESULTS.md,
#                 results.json and results.svg (about 10 minutes on 2 cores)
#   make fmt    - fail if any Go file needs gofmt (fmt-fix rewrites them)
#   make lint   - fmt check + go vet + staticcheck

SHELL := /bin/bash
GO ?= go
GOFMT ?= gofmt
# 2 cores: at most 2 test binaries at once; the whole run must stay far
# below the CI limit.
TEST_FLAGS ?= -race -count=1 -timeout 20m -p 2
PKGS ?= ./...
# Every module of the repository but bench/ (run by make bench): the library,
# then the integrations (sqllock: the SQL fallback tier, tested against
# private mariadbd and PostgreSQL servers) and the CLI, each with its own
# go.mod (go.work joins them for development).
MODULES ?= . ./dlockprom ./dlockotel ./sqllock ./dlockgocron ./cmd/dlock

# staticcheck's release pinned for the checks (honnef.co/go/tools).
STATICCHECK_VERSION ?= v0.8.2

.PHONY: all deps deps-redis vet staticcheck cross test test-fips install-test bench bench-results fmt fmt-fix lint

all: test

deps:
	@bash .ci/ensure-deps.sh

deps-redis:
	@bash .ci/ensure-deps.sh redis

vet:
	@set -e; for m in $(MODULES); do echo "go vet $$m"; (cd $$m && $(GO) vet $(PKGS)); done

staticcheck:
	@set -e; bin="$$($(GO) env GOPATH)/bin/staticcheck"; \
	if ! "$$bin" -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION:v%=%))"; then \
		echo "go install staticcheck $(STATICCHECK_VERSION)"; \
		GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi; \
	for m in $(MODULES); do echo "staticcheck $$m"; (cd $$m && "$$bin" ./...); done

# The library builds where its users build: its packages (not the test
# servers' helpers) for Windows and macOS too.
cross:
	@set -e; pkgs="$$($(GO) list ./... | grep -v /internal/testenv)"; \
	for os in windows darwin; do echo "GOOS=$$os go build (the library)"; GOOS=$$os $(GO) build $$pkgs; done

test: deps vet staticcheck cross
	@set -e; for m in $(MODULES); do echo "go test $$m"; (cd $$m && $(GO) test $(TEST_FLAGS) $(PKGS)); done
	@$(MAKE) --no-print-directory install-test

test-fips:
	$(GO) test -race -count=1 -run '^TestFIPS140Only$$' .

# make test runs it last, once the unit tests have passed.
install-test:
	@bash .ci/install-test.sh

bench: deps-redis
	cd bench && $(GO) run .

# The generation command bench/README.md names, into the committed files.
bench-results: deps-redis
	cd bench && $(GO) run . -scenarios uncontended,hotkey,ceiling,scale,cost -out .

# Lists every .go file (bench/ included) outside .git and vendor/.
GOFILES = $(shell find . -name '*.go' -not -path './.git/*' -not -path '*/vendor/*')

fmt:
	@out="$$($(GOFMT) -l $(GOFILES))"; \
	if [[ -n "$$out" ]]; then echo "gofmt needed (run make fmt-fix):"; echo "$$out"; exit 1; fi

fmt-fix:
	$(GOFMT) -w $(GOFILES)

lint: fmt vet staticcheck
