//go:build crashtest && unix

package failpoint

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// armStops arms a stop (for one second) on every SIGUSR2.
func armStops() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	go func() {
		for range ch {
			stopUntil.Store(time.Now().Add(time.Second).UnixNano())
		}
	}()
}

// stopSelf stops the process with SIGSTOP; it returns once it is continued.
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
