// Package crashtest is the root of durofs's crash-recovery suite. This
// package itself has no library code; its test is the crash-point sweep.
//
// TestCrashPointSweep builds internal/fpworker with -tags crashtest (which
// compiles in internal/failpoint) and kills it by SIGKILL at every named
// failpoint of the provider and the write-ahead log that the crash scripts
// (internal/crashcheck/script: the duroxide contract's, and the go-workflows
// engine's, whose workflow instances, tasks, activity completions,
// continue-as-new, removals and deletion reach every gw.*, gwact.* and
// gwredo.* failpoint) reach, on the first and the last hit of each, and also at every failpoint of the recovery of several crash images
// that leave an operation behind (a lease marked but nothing logged, a
// record logged but not synced, committed but not applied, a deletion half
// applied, ...). Every process of a sweep uses 4 KiB log segments, so
// appends roll to new segments and the script's checkpoints remove old ones.
//
// Each crash image is recovered in one or both flavors: "replay" (the
// recovering process has the directory alone and replays the log from the
// checkpoint) and "shared" (the test process holds the log open meanwhile,
// as a live process would, so nothing is replayed: the pending marks in
// leases and claims, and the log, must lead Open's recovery and the next
// operations to finish every commit). After recovery it checks the
// invariants: no lease or claim marks a logged commit pending, event ids
// contiguous from 1 and unique, every operation reported done fully
// visible, the operation in flight all-or-nothing, no message lost or
// duplicated. Then it runs the rest of the script (in the same flavor) and
// checks the final state against a clean run's. It fails if a
// failpoint.Hit of the provider's or the log's source was never swept.
//
// Both durability modes are swept: Durable recovers every crash both ways,
// ProcessCrashSafe (the same code without the fsyncs) alternates. Every
// go-workflows failpoint must have been killed at in both modes and its
// crash recovered both ways.
//
// Run it with
//
//	go test -count=1 -v -run TestCrashPointSweep ./scripts/crashtest/
//
// (-short skips it). Set DUROFS_SWEEP_MODE=durable or process-crash-safe
// (DUROFS_SWEEP_NOSYNC=1 is the latter) to sweep one mode,
// DUROFS_SWEEP_SCRIPT=duroxide or gw to run one script,
// DUROFS_SWEEP_ALL_FLAVORS=1 to recover every process-crash-safe crash both
// ways too, and DUROFS_SWEEP_ALL_NTH=1 to crash on every hit of every
// failpoint instead of the first and last.
package crashtest
