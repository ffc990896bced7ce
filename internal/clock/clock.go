// Package clock is the injectable wall clock of durofs. Leases, visibility and
// timestamps read it; tests replace it with a [Manual] clock to step time
// deterministically.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	// Now returns the current wall-clock time.
	Now() time.Time
}

// System is the real clock.
type System struct{}

// Now implements Clock.
func (System) Now() time.Time { return time.Now() }

// Manual is a clock that only moves when told to. It is safe for concurrent use.
type Manual struct {
	mu sync.Mutex
	t  time.Time
}

// NewManual returns a Manual clock set to t.
func NewManual(t time.Time) *Manual { return &Manual{t: t} }

// Now implements Clock.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

// Advance moves the clock by d (which may be negative, to model a step back).
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	m.t = m.t.Add(d)
	m.mu.Unlock()
}

// Set sets the clock to t.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	m.t = t
	m.mu.Unlock()
}

// Ms returns t as milliseconds since the Unix epoch, the unit of every
// timestamp durofs stores.
func Ms(t time.Time) int64 { return t.UnixMilli() }
