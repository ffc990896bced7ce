package names

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	long := strings.Repeat("z", MaxLen)
	hash := Encode(strings.Repeat("z", MaxLen+1))
	cases := []struct {
		name string
		want bool
	}{
		// Outputs of Encode.
		{"order-1", true},
		{"%", true},           // Encode("")
		{"%4Frder", true},     // Encode("Order")
		{"%2E.", true},        // Encode("..")
		{"a%00b", true},       // Encode("a\x00b")
		{"%FF%FE", true},      // Encode("\xff\xfe")
		{"%63on", true},       // Encode("con")
		{"lock", true},        // Encode("lock")
		{"nonexistent", true}, // Encode("nonexistent")
		{long, true},          // the longest direct encoding
		{hash, true},          // a hashed encoding
		{"~" + strings.Repeat("0", 64), true},

		// Not outputs of Encode.
		{"", false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"a/b", false},
		{`a\b`, false},
		{"a\x00b", false},                 // a raw NUL
		{"Order", false},                  // upper case is always escaped
		{"%61", false},                    // 'a' is never escaped
		{"%2e.", false},                   // lower-case hex
		{"%4", false},                     // truncated escape
		{"%%", false},                     // not an escape
		{"con", false},                    // a device name is escaped
		{"a%2Fb%", false},                 // trailing '%'
		{long + "z", false},               // one byte over MaxLen
		{strings.Repeat("z", 300), false}, // over NAME_MAX
		{"~", false},
		{"~" + strings.Repeat("0", 63), false}, // short hash
		{"~" + strings.Repeat("0", 65), false}, // long hash
		{"~" + strings.Repeat("A", 64), false}, // upper-case hash
		{"~" + strings.Repeat("g", 64), false}, // not hex
		{"~" + strings.Repeat("0", 63) + "/", false},
		{"%E2%82%AC", true},     // Encode("€")
		{"\xe2\x82\xac", false}, // a raw non-ASCII byte
	}
	for _, c := range cases {
		if got := Valid(c.name); got != c.want {
			t.Errorf("Valid(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{"", "a", "..", "CON", "a/b", "日本", "\xff\xfe", strings.Repeat("x", 300), "%", "%41", "~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Every encoding is valid.
		if e := Encode(s); !Valid(e) {
			t.Fatalf("Valid(Encode(%q) = %q) = false", s, e)
		}
		// A valid name is a safe component that is its own encoding (direct)
		// or has the hashed shape.
		if Valid(s) {
			if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") || strings.HasPrefix(s, ".") || len(s) > 255 {
				t.Fatalf("Valid(%q) but unsafe", s)
			}
			if !IsHashed(s) {
				id, err := Decode(s)
				if err != nil || Encode(id) != s {
					t.Fatalf("Valid(%q) but Decode = %q, %v", s, id, err)
				}
			}
		}
	})
}
