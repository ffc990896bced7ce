package fsqueue

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/durofs/durofs/internal/route"
)

// A message's name is everything the queue's index needs, so that a listing
// of the directory builds the index without opening a file:
//
//	<ULID>.<visible>.<route>
//
// ULID is the message's 26-character ULID (Crockford base32, upper case),
// which orders the queue (FIFO); visible is its visibility time in ms since
// the epoch, clamped to [0, MaxVisibleAtMs], as 10 base32 digits; route is
// RouteOf(the value of the queue's Options.IndexAttr attribute), 64 bits as
// 13 base32 digits. Every part has a fixed width and one spelling, so names
// sort as (ULID, visible, route) and a name is valid only in its canonical
// form. The message file's body repeats all of it (name, visible_at_ms,
// attrs), and every read checks that the two agree.

// Lengths of a name and its parts.
const (
	ulidLen    = ulid.EncodedSize // 26
	visLen     = 10
	routeLen   = 13
	nameLen    = ulidLen + 1 + visLen + 1 + routeLen
	crockford  = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	invalidDig = 0xFF
)

// MaxVisibleAtMs is the latest visibility time a name can carry (2^50-1 ms
// after the epoch, in the year 37648); later times are clamped to it, as
// earlier ones than the epoch are to 0.
const MaxVisibleAtMs = 1<<(5*visLen) - 1

// digit maps a byte to its value as an upper-case Crockford base32 digit.
var digit = func() (t [256]byte) {
	for i := range t {
		t[i] = invalidDig
	}
	for i := range len(crockford) {
		t[crockford[i]] = byte(i)
	}
	return t
}()

// clampVisible is the visibility time a name carries for visibleAtMs.
func clampVisible(visibleAtMs int64) int64 { return min(max(visibleAtMs, 0), MaxVisibleAtMs) }

// RouteOf is the route hash a message name carries for the value of the
// queue's IndexAttr attribute: the first 64 bits of the value's SHA-256
// (big endian), or 0 for an empty or absent value. A cryptographic hash, so
// that no one can choose ids whose routes collide on purpose; collisions by
// chance (about 1 in 2^64 per pair) only cost a reader the check of a body
// it did not need: a route says "maybe this value", the body says which.
func RouteOf(value string) uint64 { return route.Of(value) }

// parseName parses a message name (a file name without ".json") into its
// index entry; ok is false unless s is a canonical name. It allocates
// nothing, so a listing parses its directory entries in place.
func parseName[S string | []byte](s S) (e Entry, ok bool) {
	if len(s) != nameLen || s[ulidLen] != '.' || s[ulidLen+1+visLen] != '.' {
		return Entry{}, false
	}
	// The ULID: 26 digits, 130 bits, of which the top two must be 0.
	if digit[s[0]] > 7 {
		return Entry{}, false
	}
	var hi, lo uint64 // the 128 bits, big endian
	for i := range ulidLen {
		d := digit[s[i]]
		if d == invalidDig {
			return Entry{}, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(d)
	}
	binary.BigEndian.PutUint64(e.ID[:8], hi)
	binary.BigEndian.PutUint64(e.ID[8:], lo)
	vis, ok := parseDigits(s[ulidLen+1 : ulidLen+1+visLen])
	if !ok {
		return Entry{}, false
	}
	route, ok := parseDigits(s[ulidLen+1+visLen+1:])
	if !ok || digit[s[ulidLen+1+visLen+1]] > 15 { // 65 bits: the top one must be 0
		return Entry{}, false
	}
	e.VisibleAtMs, e.Route = int64(vis), route
	return e, true
}

// parseDigits decodes up to 13 base32 digits (the caller checks overflow of
// the 13th).
func parseDigits[S string | []byte](s S) (uint64, bool) {
	var v uint64
	for i := range len(s) {
		d := digit[s[i]]
		if d == invalidDig {
			return 0, false
		}
		v = v<<5 | uint64(d)
	}
	return v, true
}

// appendName appends e's name to b.
func appendName(b []byte, e Entry) []byte {
	hi := binary.BigEndian.Uint64(e.ID[:8])
	lo := binary.BigEndian.Uint64(e.ID[8:])
	var u [ulidLen]byte
	for i := ulidLen - 1; i >= 0; i-- {
		u[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	b = append(b, u[:]...)
	b = append(b, '.')
	b = appendDigits(b, uint64(clampVisible(e.VisibleAtMs)), visLen)
	b = append(b, '.')
	return appendDigits(b, e.Route, routeLen)
}

func appendDigits(b []byte, v uint64, n int) []byte {
	var d [routeLen]byte
	for i := n - 1; i >= 0; i-- {
		d[i] = crockford[v&31]
		v >>= 5
	}
	return append(b, d[:n]...)
}

// Name returns the message's name: its file name without ".json".
func (e Entry) Name() string {
	var b [nameLen]byte
	return string(appendName(b[:0], e))
}

// validName reports whether s is a canonical message name.
func validName(s string) bool {
	_, ok := parseName(s)
	return ok
}

// ValidName reports whether s is a message name (a message file's name
// without ".json"): the form [Queue.NewName] makes.
func ValidName(s string) bool { return validName(s) }

// ParseName returns the index entry a message name stands for: its ULID,
// visibility time and route hash. ok is false unless s is a valid name.
func ParseName(s string) (e Entry, ok bool) { return parseName(s) }

// nameGen is the process-global ULID source: one LockedMonotonicReader over
// crypto/rand, and the last timestamp used, so that names are strictly
// increasing within the process even if a clock steps back.
var nameGen = struct {
	mu      sync.Mutex
	lastMs  uint64
	entropy *ulid.LockedMonotonicReader
}{entropy: &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(crand.Reader, 0)}}

// NewName returns a fresh name for a message visible at visibleAtMs whose
// IndexAttr attribute has the value route ("" if the queue has no IndexAttr
// or the message no such attribute). With Options.Order, its ULID is made
// from the shared order (see Order): names are strictly increasing across
// the processes that share it. Otherwise its ULID's time is q's clock (or,
// if any clock of this process has stepped back, the latest time used so
// far), with crypto-random monotonic entropy shared by the whole process:
// names are strictly increasing within a process; across processes they
// are ordered by millisecond only. It returns "" only if the clock is
// beyond the ULID time range (year 10889).
//
// A message must carry the name made for its own VisibleAtMs and attribute
// (Enqueue, Stage and Encode check it, and make it when Message.Name is
// empty).
func (q *Queue) NewName(visibleAtMs int64, route string) string {
	var id ulid.ULID
	var ok bool
	if q.opts.Order != nil {
		id, ok = orderedID(q.clock.Now(), q.opts.Order)
	} else {
		id, ok = newID(q.clock.Now())
	}
	if !ok {
		return ""
	}
	return Entry{ID: id, VisibleAtMs: clampVisible(visibleAtMs), Route: RouteOf(route)}.Name()
}

func newID(now time.Time) (ulid.ULID, bool) {
	var ms uint64
	if now.UnixMilli() > 0 {
		ms = ulid.Timestamp(now)
	}
	nameGen.mu.Lock()
	defer nameGen.mu.Unlock()
	ms = max(ms, nameGen.lastMs)
	for ms <= ulid.MaxTime() {
		id, err := ulid.New(ms, nameGen.entropy)
		if err == nil {
			nameGen.lastMs = ms
			return id, true
		}
		if !errors.Is(err, ulid.ErrMonotonicOverflow) {
			return ulid.ULID{}, false
		}
		ms++ // 2^80 names in one ms exhausted: move to the next ms
	}
	return ulid.ULID{}, false
}

// orderedID makes a ULID from order's value for the time now: the value's
// ms as the ULID's time, its 16-bit sequence as the first two bytes of the
// entropy, and 64 random bits after them (the value alone already makes the
// ULID unique among the processes sharing order).
func orderedID(now time.Time, order func(ms uint64) uint64) (ulid.ULID, bool) {
	var ms uint64
	if now.UnixMilli() > 0 {
		ms = ulid.Timestamp(now)
	}
	if ms > ulid.MaxTime() {
		return ulid.ULID{}, false
	}
	v := order(ms)
	var id ulid.ULID
	if err := id.SetTime(v >> 16); err != nil {
		return ulid.ULID{}, false
	}
	var e [10]byte
	binary.BigEndian.PutUint16(e[:2], uint16(v))
	binary.BigEndian.PutUint64(e[2:], rand.Uint64())
	if err := id.SetEntropy(e[:]); err != nil {
		return ulid.ULID{}, false
	}
	return id, true
}

// routeValue is the value of m's IndexAttr attribute.
func (q *Queue) routeValue(m *Message) string {
	if q.opts.IndexAttr == "" {
		return ""
	}
	return m.Attrs[q.opts.IndexAttr]
}

// checkBody verifies that a message body agrees with the name it was read
// under: the name field, the visibility time and the route.
func (q *Queue) checkBody(name string, e Entry, m *Message) error {
	if m.Name != name {
		return fmt.Errorf("name field %q", m.Name)
	}
	if v := clampVisible(m.VisibleAtMs); v != e.VisibleAtMs {
		return fmt.Errorf("visible_at_ms %d, the name says %d", m.VisibleAtMs, e.VisibleAtMs)
	}
	if r := RouteOf(q.routeValue(m)); r != e.Route {
		return fmt.Errorf("route %016x (attribute %q), the name says %016x", r, q.opts.IndexAttr, e.Route)
	}
	return nil
}
