package calltime

import (
	"context"
	"testing"
	"time"
)

func TestAddLogSync(t *testing.T) {
	var ti Times
	ctx := With(context.Background(), &ti)
	AddLogSync(ctx, 3*time.Millisecond)
	AddLogSync(context.WithoutCancel(ctx), 2*time.Millisecond) // values survive WithoutCancel
	AddLogSync(context.Background(), time.Second)              // no Times: nothing to add to
	if got := ti.LogSync(); got != 5*time.Millisecond {
		t.Fatalf("LogSync = %v, want 5ms", got)
	}
}
