// Package conformance is a reusable test suite for implementations of
// [provider.Provider], in the spirit of testing/fstest.TestFS and
// golang.org/x/net/nettest: a provider author supplies a [Factory] and calls
// [Run] from an ordinary Go test.
//
// The suite is a Go port of duroxide's provider validation tests (the
// provider_validation module of the Rust crate, catalog in the durofs contract
// document §1.5). It covers the categories that every provider needs:
// instance_creation, atomicity, error_handling, instance_locking,
// lock_expiration, multi_execution, queue_semantics, long_polling and
// poison_message (catalog A–G, I, J); the management, deletion, prune and
// bulk_deletion categories of the Admin capability (H, L, M, N); and
// cancellation, capability_filtering, sessions, custom_status and
// tag_filtering (K, O, P, Q, R) — catalog numbers 1–178, listed by
// [Catalog].
//
// # Running the suite
//
// Implement [Factory] and call [Run] (or [RunCategory] for one category):
//
//	type fsFactory struct{}
//
//	func (fsFactory) NewProvider(t testing.TB) provider.Provider {
//		p, err := myprovider.Open(t.TempDir()) // a fresh, empty store per call
//		if err != nil {
//			t.Fatalf("open provider: %v", err)
//		}
//		t.Cleanup(func() { p.Close() })
//		return p
//	}
//	func (fsFactory) LockTimeout() time.Duration        { return time.Second }
//	func (fsFactory) ShortPollThreshold() time.Duration { return 100 * time.Millisecond }
//	func (fsFactory) LongPolls() bool                   { return true }
//	func (fsFactory) CorruptInstanceHistory(t testing.TB, p provider.Provider, instance string) {
//		// Make every stored history event of instance undecodable.
//		if err := myprovider.CorruptHistoryForTest(p, instance); err != nil {
//			t.Fatal(err)
//		}
//	}
//	func (fsFactory) MaxAttemptCount(t testing.TB, p provider.Provider, instance string) uint32 {
//		// The max attempt count over instance's orchestrator messages, locked or not.
//		n, err := myprovider.MaxAttemptCountForTest(p, instance)
//		if err != nil {
//			t.Fatal(err)
//		}
//		return n
//	}
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, fsFactory{})
//	}
//
// conformance imports package provider, so a provider that lives in package
// provider itself must run the suite from an external test package (package
// provider_test); its hooks can reach unexported internals through an
// export_test.go file.
//
// Subtests are named after the duroxide module and function, so a single
// test can be selected the usual way:
//
//	go test -run 'TestConformance/atomicity/test_concurrent_ack_prevention'
//
// # Fresh stores, parallelism and timing
//
// Every test that runs calls [Factory.NewProvider] exactly once and needs a
// fresh, isolated store: several tests assert global facts such as "the next
// fetch returns None". The one exception is
// capability_filtering/test_fetch_filter_boundary_versions, which asks for a
// second, isolated provider, as duroxide's test does. Providers must register
// their cleanup with t.Cleanup.
//
// The suite is timing-based. It uses the real clock and real sleeps exactly as
// duroxide's tests do (for example lock timeout + 100 ms to wait for a lock to
// expire, and 5.1 s for a delayed timer), so the provider must compare lock
// and visibility times against the wall clock with millisecond resolution.
// The tests of a category run in parallel with each other (t.Parallel) to
// keep the wall time down; categories run one after another, and [Run]
// returns only when every test has finished. go test's -parallel flag
// (default GOMAXPROCS) caps how many tests run at once, and since most tests
// spend their time sleeping a higher value helps on small machines: with a
// 1 s lock timeout the suite takes about 12 s at -parallel 16 and about 17 s
// at -parallel 2. The longest single test waits 5.1 s.
//
// # Factory hooks
//
// [Factory.LockTimeout] is the lock timeout the expiry tests use; it must be
// at least one second (one test hard-codes a 1 s lock and waits
// LockTimeout()+100ms for it to expire). [Factory.ShortPollThreshold] bounds
// "returns immediately" for short-polling providers and defaults to 100 ms
// when zero. [Factory.LongPolls] selects the long-polling variants of the
// long_polling tests: a long-polling provider runs
// test_long_poll_waits_for_timeout and
// test_long_poll_work_item_waits_for_timeout, a short-polling one runs the
// two threshold-based short-poll tests instead, and the non-applicable pair
// is reported as skipped. test_fetch_respects_timeout_upper_bound runs for
// both.
//
// [Factory.CorruptInstanceHistory] and [Factory.MaxAttemptCount] are test-only
// hooks into the store behind a provider (duroxide's corrupt_instance_history
// and get_max_attempt_count). They take the provider explicitly, so unlike
// duroxide's Rust suite no second "shared store" factory flavour is needed:
// the hook acts on the store of the provider it is given. The
// capability_filtering tests 123–126 and 128 (the corrupted-history tests)
// call them, always with the provider the test made.
//
// cancellation/test_orphan_activity_after_instance_force_deletion needs the
// Admin capability (a forced DeleteInstance) and skips itself when
// Provider.Admin reports none;
// capability_filtering/test_ack_appends_event_to_corrupted_history then only
// checks that the ack succeeds and leaves out its GetInstanceInfo check.
//
// Assertions follow the catalog exactly: where duroxide's test accepts more
// than one outcome, so does this suite. Every subtest is registered exactly
// once; [Catalog] lists them with their catalog numbers.
package conformance
