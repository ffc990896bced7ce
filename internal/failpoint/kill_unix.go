//go:build crashtest && unix

package failpoint

import (
	"os"
	"syscall"
)

// kill ends the process at once with SIGKILL: no deferred call runs.
func kill() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is delivered before the sender's kill(2) returns; never reached
}
