// Package crashtest is the root of durofs's crash-recovery suite. This
// package itself has no library code; its test is the crash-point sweep.
//
// TestCrashPointSweep builds internal/fpworker with -tags crashtest (which
// compiles in internal/failpoint) and kills it by SIGKILL at every named
// failpoint of the provider that the crash script (internal/crashcheck/script)
// reaches, on the first and the last hit of each, and also at every failpoint
// of the recovery of several committed but unapplied operations. After each
// kill it recovers the directory in the test process and checks the
// invariants: no pending commit records, event ids contiguous from 1 and
// unique, every operation reported done fully visible, the operation in
// flight all-or-nothing, no message lost or duplicated. Then it runs the rest
// of the script and checks the final state. It fails if a failpoint.Hit of
// the provider's source was never swept.
//
// Run it with
//
//	go test -count=1 -v -run TestCrashPointSweep ./scripts/crashtest/
//
// (-short skips it). Set DUROFS_SWEEP_ALL_NTH=1 to crash on every hit of
// every failpoint instead of the first and last, and DUROFS_SWEEP_NOSYNC=1 to
// run the killed processes in ProcessCrashSafe mode.
package crashtest
