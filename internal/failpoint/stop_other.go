//go:build crashtest && !unix

package failpoint

// armStops does nothing: stops need Unix signals.
func armStops() {}

// stopSelf does nothing: stops need Unix signals.
func stopSelf() {}
