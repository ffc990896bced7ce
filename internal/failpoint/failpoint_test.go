package failpoint_test

import (
	"testing"

	"github.com/durofs/durofs/internal/failpoint"
)

// TestHitUnarmed checks that Hit returns when no failpoint is armed (in a
// normal build it is a no-op; in a crashtest build the environment of
// go test arms nothing).
func TestHitUnarmed(t *testing.T) {
	t.Setenv("DUROFS_FAILPOINT", "")
	for range 3 {
		failpoint.Hit("test.unarmed")
	}
}
