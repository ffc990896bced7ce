//go:build !crashtest

package failpoint

// Enabled reports whether failpoints are compiled in (the crashtest build
// tag). It is false in this build.
const Enabled = false

// Hit marks the crash point name. Without the crashtest build tag it does
// nothing and is inlined away, so calls cost nothing.
func Hit(name string) {}
