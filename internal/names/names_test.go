package names

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeTable(t *testing.T) {
	cases := []struct{ in, want string }{
		{"order-1", "order-1"},
		{"parent::child", "parent%3A%3Achild"},
		{"Order", "%4Frder"},
		{"..", "%2E."},
		{".hidden", "%2Ehidden"},
		{"a/b", "a%2Fb"},
		{`a\b`, "a%5Cb"},
		{"a\x00b", "a%00b"},
		{"con", "%63on"},
		{"con.txt", "%63on.txt"},
		{"console", "console"},
		{"", "%"},
		{"100%", "100%25"},
		{"~x", "%7Ex"},
	}
	for _, c := range cases {
		if got := Encode(c.in); got != c.want {
			t.Errorf("Encode(%q) = %q, want %q", c.in, got, c.want)
		}
		back, err := Decode(c.want)
		if err != nil || back != c.in {
			t.Errorf("Decode(%q) = %q, %v; want %q", c.want, back, err, c.in)
		}
	}
}

func TestEncodeIsSafeAndInjective(t *testing.T) {
	ids := []string{"a", "A", "é", "e\u0301", "\u00e9", "x/../y", "CON", "con", "Con", strings.Repeat("z", 10<<10),
		strings.Repeat("z", 10<<10) + "1", "\t", "\n", "a.b", "a..b", "ü", "U\u0308", "日本語", "emoji🎉"}
	seen := map[string]string{}
	folded := map[string]string{}
	for _, id := range ids {
		e := Encode(id)
		if len(e) > MaxLen+1 && !IsHashed(e) {
			t.Errorf("Encode(%q) too long: %d", id, len(e))
		}
		if len(e) > 70 && IsHashed(e) {
			t.Errorf("hashed name too long: %q", e)
		}
		if strings.ContainsAny(e, "/\\\x00:") || e == "." || e == ".." || strings.HasPrefix(e, ".") {
			t.Errorf("Encode(%q) = %q is not a safe component", id, e)
		}
		if prev, ok := seen[e]; ok && prev != id {
			t.Errorf("collision: %q and %q both encode to %q", prev, id, e)
		}
		seen[e] = id
		lf := strings.ToLower(e)
		if prev, ok := folded[lf]; ok && prev != id {
			t.Errorf("case-insensitive collision: %q and %q", prev, id)
		}
		folded[lf] = id
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "a", "..", "CON", "a/b", "日本", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		e := Encode(id)
		if e == "" || strings.ContainsAny(e, "/\\\x00") || strings.HasPrefix(e, ".") || len(e) > MaxLen+3 {
			t.Fatalf("unsafe encoding %q of %q", e, id)
		}
		if !utf8.ValidString(e) {
			t.Fatalf("encoding not ASCII: %q", e)
		}
		if strings.ToLower(e) != e && !strings.Contains(e, "%") {
			t.Fatalf("upper case kept in %q", e)
		}
		if !IsHashed(e) {
			back, err := Decode(e)
			if err != nil || back != id {
				t.Fatalf("Decode(Encode(%q)) = %q, %v", id, back, err)
			}
		}
	})
}
