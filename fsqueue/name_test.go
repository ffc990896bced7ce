package fsqueue_test

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/durofs/durofs/fsqueue"
)

// FuzzMessageName: a name parses only in its canonical form, and then
// prints back to itself; any entry prints to a name that parses back to it
// (its visibility time clamped to [0, MaxVisibleAtMs]); a name carries
// exactly the ULID, visibility time and route it was made of.
func FuzzMessageName(f *testing.F) {
	for _, s := range []string{
		"01ARZ3NDEKTSV4RRFFQ69G5FAV.0000000000.0000000000000",
		"7ZZZZZZZZZZZZZZZZZZZZZZZZZ.ZZZZZZZZZZ.FZZZZZZZZZZZZ",
		"01ARZ3NDEKTSV4RRFFQ69G5FAV.01JXM0RB3F.9X2C8H4N7M1PQ",
		"01ARZ3NDEKTSV4RRFFQ69G5FAV.0000000000.G000000000000", // 65-bit route
		"81ARZ3NDEKTSV4RRFFQ69G5FAV.0000000000.0000000000000", // 130-bit ULID
		"01arz3ndektsv4rrffq69g5fav.0000000000.0000000000000", // lower case
		"01ARZ3NDEKTSV4RRFFQ69G5FAV.000000000I.0000000000000", // not Crockford
		"01ARZ3NDEKTSV4RRFFQ69G5FAV",                          // a version-2 name
		"01ARZ3NDEKTSV4RRFFQ69G5FAV.0000000000.0000000000000.json",
		"",
	} {
		f.Add(s, []byte("0123456789abcdef"), int64(1_700_000_000_000), uint64(0x0123456789abcdef))
	}
	f.Add("", []byte{}, int64(-1), uint64(0))
	f.Add("", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(1)<<62, ^uint64(0))
	f.Fuzz(func(t *testing.T, s string, id []byte, vis int64, route uint64) {
		if e, ok := fsqueue.ParseName(s); ok {
			if got := e.Name(); got != s {
				t.Fatalf("ParseName(%q) = %+v, which prints as %q", s, e, got)
			}
			if !fsqueue.ValidName(s) {
				t.Fatalf("ValidName(%q) = false after ParseName accepted it", s)
			}
			if u, err := ulid.ParseStrict(s[:ulid.EncodedSize]); err != nil || u != e.ID || strings.ToUpper(s) != s {
				t.Fatalf("ParseName(%q): ULID %s, ulid.ParseStrict says %s, %v", s, e.ID, u, err)
			}
		} else if fsqueue.ValidName(s) {
			t.Fatalf("ValidName(%q) = true, ParseName refuses it", s)
		}
		var e fsqueue.Entry
		copy(e.ID[:], id)
		e.VisibleAtMs, e.Route = vis, route
		name := e.Name()
		back, ok := fsqueue.ParseName(name)
		want := e
		want.VisibleAtMs = min(max(vis, 0), fsqueue.MaxVisibleAtMs)
		if !ok || back != want {
			t.Fatalf("%+v prints as %q, which parses as %+v, %v; want %+v", e, name, back, ok, want)
		}
	})
}
