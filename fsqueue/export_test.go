package fsqueue

// SetBusyWaitHook sets the hook ClaimNext runs when it starts waiting for a
// busy message; the returned func removes it.
func SetBusyWaitHook(f func(name string)) (undo func()) {
	testHookBusyWait = f
	return func() { testHookBusyWait = nil }
}

// BusyWaitForTest is busyWait.
const BusyWaitForTest = busyWait

// SetClaimReadHook sets the hook a watched claim cache runs between reading
// a claim file and caching it; the returned func removes it.
func SetClaimReadHook(f func(name string)) (undo func()) {
	testHookClaimRead = f
	return func() { testHookClaimRead = nil }
}
