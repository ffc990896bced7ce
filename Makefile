# durofs — see README.md.
GO ?= go
PKGS := ./...

.PHONY: test test-goworkflows vet lint crossbuild races demo fuzz-smoke crashtest crashtest-long crashpoints gwchaos stalltest powerloss bench bench-big bench-ext4 bench-gw bench-gw-ext4 bench-quick clean

## test: vet, the whole suite with -race (printing the multi-process race
## tests' round counts), and the cross-platform build. The bench module (its own go.mod)
## is tested too (without -race, below): its harness test runs every
## benchmark once at a tiny size.
## So is the goworkflows module (its own go.mod): go-workflows' backend and
## end-to-end suites in both durability modes, the multi-process test, the
## durofs CLI on a go-workflows directory, and the diagnostics UI in a
## headless Chromium (apt-get install chromium; skipped without it unless CI
## is set). scripts/gwtest reruns once, and only, a failure with the exact
## signature of a race inside go-workflows' own suite (see the script).
## The two crash sweeps run once each, without -race, through their own
## targets (crashpoints, powerloss), which print their summaries: the race
## detector adds nothing to them (the crash-point sweep's workers are
## separate binaries) and on two CPUs it doubled their share of the run.
## The conformance catalog's tests run in parallel (t.Parallel), most of
## their time asleep waiting out 1 s locks: -parallel 8 lets eight overlap
## instead of GOMAXPROCS (2 here), which took its three runs in provider/
## from 60 to 39 s. The bench module (benchmark tooling, not shipped) is
## tested without -race: its SQLite is transpiled C, 5 to 10 times slower
## under the race detector (TestQuickRun 37 s against 3 s), and the library
## code it drives is race-tested above.
## The lease and fsqueue race tests append their round counts to
## $$DUROFS_RACE_REPORT (internal/racereport), printed after the run.
SWEEPS := ^(TestCrashPointSweep|TestPowerLossSweep)$$
RACE_REPORT := $(CURDIR)/races.out
test: vet crossbuild
	@rm -f $(RACE_REPORT)
	DUROFS_RACE_REPORT=$(RACE_REPORT) $(GO) test -race -count=1 -parallel 8 -timeout 20m -skip '$(SWEEPS)' $(PKGS)
	@sort $(RACE_REPORT) && rm -f $(RACE_REPORT)
	cd bench && $(GO) vet ./... && $(GO) test -count=1 -parallel 8 -timeout 20m ./...
	cd goworkflows && $(GO) vet ./... && ../scripts/gwtest -race -count=1 -timeout 20m ./...
	$(GO) test -run XXX -bench . -benchtime 1x ./provider/ > /dev/null
	@$(MAKE) --no-print-directory crashpoints powerloss

vet:
	$(GO) vet $(PKGS)

## test-goworkflows: only the goworkflows module (go-workflows' suites, both
## durability modes, -race; and the multi-process test), with subtest names.
test-goworkflows:
	cd goworkflows && $(GO) vet ./... && { $(GO) test -race -count=1 -timeout 20m -v ./... > gw-test.out 2>&1; s=$$?; \
		grep -E '^(\s*--- |ok|FAIL|PASS|panic)' gw-test.out; echo "(full output: goworkflows/gw-test.out)"; exit $$s; }

## lint: formatting, vet, staticcheck and deadcode (pinned versions, fetched
## from the module proxy by go run) over the three modules: deadcode fails on
## any function no program or test reaches. The main module is checked with
## and without -tags crashtest (its failpoint builds); the other two have no
## file of their own under that tag (checked here), so the tag changes only
## their dependencies, which neither tool reports on: they are checked once.
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.7.0
DEADCODE = golang.org/x/tools/cmd/deadcode@v0.45.0
lint: vet
	@out=$$(gofmt -l . | grep -v '^vendor/'); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@out=$$(grep -rlE --include='*.go' '^//go:build .*crashtest' goworkflows bench); \
		if [ -n "$$out" ]; then echo "crashtest-tagged files outside the main module (lint them with the tag too):"; echo "$$out"; exit 1; fi
	@for m in .:crashtest goworkflows: bench:; do \
		dir=$${m%%:*}; tags=$${m#*:}; \
		for t in "" $${tags:+-tags=$$tags}; do \
			(cd $$dir && $(GO) run $(STATICCHECK) $$t ./...) || exit 1; \
			out=$$(cd $$dir && $(GO) run $(DEADCODE) -test $$t ./...) || exit 1; \
			if [ -n "$$out" ]; then echo "unreachable code in $$dir $$t:"; echo "$$out"; exit 1; fi; \
		done; \
	done

## crossbuild: the module must build for linux, darwin and windows, and its
## tests type-check on a 32-bit platform (386).
crossbuild:
	GOOS=linux $(GO) build $(PKGS)
	GOOS=darwin $(GO) build $(PKGS)
	GOOS=windows $(GO) build $(PKGS)
	GOARCH=386 $(GO) vet $(PKGS)

## races: run the lease and fsqueue race tests alone and print their round
## counts (make test prints them from its own run).
races:
	@$(GO) test -count=1 -run 'Race|MultiProcess' -v ./lease/ ./fsqueue/ | grep -E '^(lease race|fsqueue race)' || true

## fuzz-smoke: a short run of every fuzz target. The budgets are execution
## counts (2 to 4 s of fuzzing each here), not durations: with a duration, Go before 1.27
## can fail a clean run with "context deadline exceeded" when -fuzztime expires
## while a worker is mid-call (go.dev/issue/75804).
fuzz-smoke:
	$(GO) test -run XXX -fuzz '^FuzzUnmarshalEvent$$' -fuzztime 100000x ./provider/
	$(GO) test -run XXX -fuzz '^FuzzUnmarshalWorkItem$$' -fuzztime 50000x ./provider/
	$(GO) test -run XXX -fuzz '^FuzzParseObject$$' -fuzztime 75000x ./provider/
	$(GO) test -run XXX -fuzz '^FuzzRead$$' -fuzztime 15000x ./history/
	$(GO) test -run XXX -fuzz '^FuzzDecodeLine$$' -fuzztime 100000x ./history/
	$(GO) test -run XXX -fuzz '^FuzzEncode$$' -fuzztime 200000x ./internal/names/
	$(GO) test -run XXX -fuzz '^FuzzLeaseFile$$' -fuzztime 40000x ./lease/
	$(GO) test -run XXX -fuzz '^FuzzMessageName$$' -fuzztime 100000x ./fsqueue/

## crashtest: the CI-size kill -9 chaos run (3 workers, >= 400 SIGKILLs, 3
## SIGSTOP zombie rounds; the driver deletes a tenth of the chain, fan-out
## and cancel instances, forced while they run), then every invariant of
## docs/design.md §6 (a deleted instance must leave nothing); then the
## go-workflows chaos run (3 go-workflows worker processes, 100 SIGKILLs,
## 100 workflows: every result exact, every history well formed, every
## activity run at least once, counted); exits non-zero on any violation.
crashtest:
	$(GO) run ./scripts/crashtest/chaos --duration 60s --kills 400 --zombies 3 --deletes 0.1
	@$(MAKE) --no-print-directory gwchaos

## gwchaos: the go-workflows chaos run alone (goworkflows/chaos_test.go);
## GW_CHAOS_KILLS sets the number of SIGKILLs.
GW_CHAOS_KILLS ?= 100
gwchaos:
	@cd goworkflows && out=$$(DUROFS_GW_CHAOS_KILLS=$(GW_CHAOS_KILLS) $(GO) test -count=1 -v -run '^TestChaos$$' -timeout 20m . 2>&1); status=$$?; \
	echo "$$out" | grep -E 'chaos_test|^(---|ok|FAIL|panic)'; exit $$status

## crashtest-long: >= 5,000 kills (about 20 minutes).
crashtest-long:
	$(GO) run ./scripts/crashtest/chaos --duration 15m --kills 5000 --zombies 20 --deletes 0.1

## crashpoints: SIGKILL a process at every named failpoint of the commit,
## redo, replay, checkpoint, lease and enqueue paths and of the go-workflows
## engine (built with -tags crashtest; two scripts: the duroxide contract and
## the go-workflows engine operations), in both durability modes; recover
## alone (replay) and beside a live process (no replay), check, finish the
## script, check again. About 3-5 minutes on the shared 2-CPU VM (10 under
## heavy load); exits non-zero on a violation.
crashpoints:
	@out=$$($(GO) test -count=1 -v -timeout 40m -run TestCrashPointSweep ./scripts/crashtest/ 2>&1); status=$$?; \
	echo "$$out" | grep -Ev '^=== (RUN|PAUSE|CONT)'; exit $$status

## stalltest: no process can stall another. 3 workers; worker 0 is
## SIGSTOPped >= 200 times, at random moments and (half of the stops) at its
## next failpoint inside an ack or commit, each time for a random time up to
## 2 x the lock timeout, while the two others ack; prints the others' ack
## latency (p50/p99/max) and fails if one took longer than the lock timeout +
## 250 ms (the ack's own work under load: 1 ms flock polling, CPU
## contention; the others' acks while the stopped worker was not stopped stay
## far below it) after its wait for the log's group fdatasync is taken out:
## each ack reports that wait (disk time, which no stopped process holds up;
## a disk stall of ~0.9 s inside fdatasync once failed CI). A 400 ms lock
## timeout (600 ms until 2026-11-29) keeps the stops short: about 2.5 minutes
## with the build, of which 1.5 stopping; the others' slowest ack was 204 ms.
stalltest:
	$(GO) run -tags crashtest ./scripts/crashtest/chaos --stops 200 --duration 0 --lock-timeout 400ms --stall-margin 250ms --stop-at-failpoints 0.5 --stop-gap-max 100ms

## powerloss: three provider instances share a strict in-memory file system;
## crash it at every sync point of their interleaved workload (two crash
## models), recover, verify, drain; kill -9 one process before every change
## it makes (ProcessCrashSafe mode), the others stopping there or going on;
## inject writeback errors into the log and
## checkpoint fsyncs; and show that a weakened commit path fails the sweep.
## Prints the summary lines (and any violation); exits non-zero on failure.
powerloss:
	@out=$$($(GO) test -count=1 -v -run 'TestPowerLoss' ./provider/ 2>&1); status=$$?; \
	echo "$$out" | grep -E 'power loss|kill -9|VIOLATION|^(---|ok|FAIL|panic)'; exit $$status

## bench: the benchmark harness (see BENCHMARKS.md): durable turn throughput
## at 1, 2 and 4 processes vs the SQLite reference, exact fsyncs per ack,
## fetch latency at 100 / 10k / 100k queued messages, restart after kill -9
## with 10k instances, peak RSS; targets of docs/design.md §7 marked PASS/MISS.
## Data goes to bench/.data (or $$DUROBENCH_DIR), which must be on a disk.
## The report is printed and written to bench/bench-report.md.
BENCH_ARGS ?=
bench:
	cd bench && $(GO) run ./cmd/durobench -out bench-report.md $(BENCH_ARGS)

## bench-big: make bench plus the large cases: the fetch section with 1M
## queued (visible and delayed, durofs and SQLite; targets: first fetch
## after Open <= 1 s, peak RSS <= 64 MiB, p50 <= 2x the p50 with 100) and a
## durofs restart with 1M instances on disk (10k pending). The set-ups write
## a million files per case (a few GiB on bench/.data; the fetch section
## alone took 16 minutes, 24 with the clean-up, on the loaded 2-vCPU VM).
## Only the fetch section: make bench-big BENCH_ARGS='-only fetch'.
bench-big:
	cd bench && $(GO) run ./cmd/durobench -big -out bench-report.md $(BENCH_ARGS)

## bench-ext4: durobench (default: its throughput section) on a fresh,
## loop-mounted ext4 image with a journal, beside make bench on the default
## directory; needs root. Report: bench/bench-report-ext4.md.
## bench-gw-ext4: make bench-gw on such an image.
bench-ext4:
	bash scripts/bench-ext4.sh $(BENCH_ARGS)

bench-gw-ext4:
	bash scripts/bench-ext4.sh gw $(GW_BENCH_ARGS)

## bench-gw: go-workflows workflows/s on the durofs backend vs go-workflows'
## own SQLite backend (bench/gwbench): its bench tool's tree and a chain of
## activities, at 1 process and at 4 worker processes on one store; goals
## >= 1.0x and >= 1.5x, from the medians of 3 alternating measurements each.
## GW_BENCH_ARGS: see go run ./cmd/gwbench -h.
GW_BENCH_ARGS ?= -runs 3
bench-gw:
	cd bench && $(GO) run ./cmd/gwbench $(GW_BENCH_ARGS)

## bench-quick: the harness at tiny sizes (checks it runs; figures mean nothing).
bench-quick:
	cd bench && $(GO) run ./cmd/durobench -quick -runs 1 $(BENCH_ARGS)

## demo: the main job (see README). --force: a rerun replaces the previous
## run's ./durofs-demo (never a directory some process has open).
demo:
	$(GO) run ./cmd/durofs demo --force

clean:
	rm -rf durofs-demo
