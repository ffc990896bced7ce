package provider

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTagFilterConstructors(t *testing.T) {
	long := strings.Repeat("x", MaxTagNameBytes+1)
	maxLen := strings.Repeat("y", MaxTagNameBytes)
	tests := []struct {
		name    string
		tags    []string
		wantSet []string
		wantErr bool
	}{
		{"none", nil, nil, true},
		{"empty slice", []string{}, nil, true},
		{"one", []string{"gpu"}, []string{"gpu"}, false},
		{"dedupe and sort", []string{"gpu", "cpu", "gpu"}, []string{"cpu", "gpu"}, false},
		{"five", []string{"a", "b", "c", "d", "e"}, []string{"a", "b", "c", "d", "e"}, false},
		{"six duplicates to five", []string{"a", "b", "c", "d", "e", "a"}, []string{"a", "b", "c", "d", "e"}, false},
		{"six", []string{"a", "b", "c", "d", "e", "f"}, nil, true},
		{"max length", []string{maxLen}, []string{maxLen}, false},
		{"too long", []string{"ok", long}, nil, true},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			mode TagFilterMode
			fn   func(...string) (TagFilter, error)
		}{{TagsOnly, Tags}, {TagDefaultAnd, DefaultAndTags}} {
			f, err := c.fn(tt.tags...)
			if tt.wantErr {
				if err == nil {
					t.Errorf("%s (mode %d): got %#v, want error", tt.name, c.mode, f)
				} else if !errors.Is(err, ErrInvalidTagFilter) {
					t.Errorf("%s: error %v does not wrap ErrInvalidTagFilter", tt.name, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s (mode %d): %v", tt.name, c.mode, err)
				continue
			}
			if f.Mode != c.mode || !reflect.DeepEqual(f.Set, tt.wantSet) {
				t.Errorf("%s: got %#v, want mode %d set %v", tt.name, f, c.mode, tt.wantSet)
			}
		}
	}
	// The caller's slice is not modified.
	in := []string{"b", "a", "b"}
	if _, err := Tags(in...); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, []string{"b", "a", "b"}) {
		t.Errorf("Tags modified its argument: %v", in)
	}
	if !reflect.DeepEqual(DefaultOnlyTags(), TagFilter{}) {
		t.Errorf("DefaultOnlyTags() = %#v, want the zero value", DefaultOnlyTags())
	}
	if AnyTag().Mode != TagAny || NoTags().Mode != TagNone {
		t.Error("AnyTag/NoTags have the wrong mode")
	}
}

func TestMustTagsPanics(t *testing.T) {
	for name, fn := range map[string]func(...string) TagFilter{"MustTags": MustTags, "MustDefaultAndTags": MustDefaultAndTags} {
		if f := fn("gpu"); !f.Matches(jtPtr("gpu")) {
			t.Errorf("%s(gpu) does not match gpu", name)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s() did not panic", name)
				}
			}()
			fn()
		}()
	}
}

func TestTagFilterMatches(t *testing.T) {
	gpu, cpu, empty := jtPtr("gpu"), jtPtr("cpu"), jtPtr("")
	filters := []struct {
		name string
		f    TagFilter
		// results for tag nil, "gpu", "cpu", ""
		want [4]bool
	}{
		{"DefaultOnly", DefaultOnlyTags(), [4]bool{true, false, false, false}},
		{"zero value", TagFilter{}, [4]bool{true, false, false, false}},
		{"Tags{gpu}", MustTags("gpu"), [4]bool{false, true, false, false}},
		{"Tags{gpu,cpu}", MustTags("gpu", "cpu"), [4]bool{false, true, true, false}},
		{"DefaultAnd{gpu}", MustDefaultAndTags("gpu"), [4]bool{true, true, false, false}},
		{"Any", AnyTag(), [4]bool{true, true, true, true}},
		{"None", NoTags(), [4]bool{false, false, false, false}},
		{"unknown mode", TagFilter{Mode: 99, Set: []string{"gpu"}}, [4]bool{false, false, false, false}},
	}
	for _, tt := range filters {
		for i, tag := range []*string{nil, gpu, cpu, empty} {
			if got := tt.f.Matches(tag); got != tt.want[i] {
				name := "nil"
				if tag != nil {
					name = *tag
				}
				t.Errorf("%s.Matches(%q) = %v, want %v", tt.name, name, got, tt.want[i])
			}
		}
	}
}

func TestParseSemVer(t *testing.T) {
	good := map[string]SemVer{
		"0.0.0":                    {},
		"0.1.26":                   {0, 1, 26},
		"1.2.3":                    {1, 2, 3},
		"10.20.30":                 {10, 20, 30},
		"18446744073709551615.0.0": {Major: 18446744073709551615},
	}
	for s, want := range good {
		got, err := ParseSemVer(s)
		if err != nil || got != want {
			t.Errorf("ParseSemVer(%q) = %v, %v; want %v", s, got, err, want)
			continue
		}
		if got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	bad := []string{"", "1", "1.2", "1.2.3.4", "1.2.", ".1.2", "a.b.c", "1.2.3-beta", "1.2.3+build",
		"v1.2.3", " 1.2.3", "1.2.3 ", "01.2.3", "1.02.3", "1.2.03", "-1.2.3", "+1.2.3", "1..3",
		"18446744073709551616.0.0", "1.2.3\n", "１.2.3"}
	for _, s := range bad {
		if v, err := ParseSemVer(s); err == nil {
			t.Errorf("ParseSemVer(%q) = %v, want error", s, v)
		} else if !errors.Is(err, ErrInvalidSemVer) {
			t.Errorf("ParseSemVer(%q) error %v does not wrap ErrInvalidSemVer", s, err)
		}
	}
}

func TestSemVerCompare(t *testing.T) {
	order := []SemVer{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 26}, {0, 2, 0}, {1, 0, 0}, {1, 0, 10}, {2, 0, 0}}
	for i, a := range order {
		for j, b := range order {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := a.Compare(b); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestSemverRangeAndCapabilityFilter(t *testing.T) {
	v := func(s string) SemVer {
		t.Helper()
		sv, err := ParseSemVer(s)
		if err != nil {
			t.Fatal(err)
		}
		return sv
	}
	r := NewSemverRange(v("0.1.0"), v("0.2.5"))
	if r.Min != v("0.1.0") || r.Max != v("0.2.5") {
		t.Fatalf("NewSemverRange = %#v", r)
	}
	for s, want := range map[string]bool{"0.0.9": false, "0.1.0": true, "0.1.26": true, "0.2.5": true, "0.2.6": false, "1.0.0": false} {
		if got := r.Contains(v(s)); got != want {
			t.Errorf("range %v..=%v Contains(%s) = %v, want %v", r.Min, r.Max, s, got, want)
		}
	}
	if !NewSemverRange(v("1.0.0"), v("1.0.0")).Contains(v("1.0.0")) {
		t.Error("a single-version range does not contain its version")
	}
	if NewSemverRange(v("2.0.0"), v("1.0.0")).Contains(v("1.5.0")) {
		t.Error("an inverted range contains something")
	}

	tests := []struct {
		name   string
		filter *DispatcherCapabilityFilter
		ver    string
		want   bool
	}{
		{"nil filter", nil, "9.9.9", true},
		{"empty list", &DispatcherCapabilityFilter{}, "0.1.0", false},
		{"empty non-nil list", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{}}, "0.0.0", false},
		{"inside", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{r}}, "0.1.26", true},
		{"lower bound", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{r}}, "0.1.0", true},
		{"upper bound", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{r}}, "0.2.5", true},
		{"above", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{r}}, "0.2.6", false},
		{"only first range used", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{r, NewSemverRange(v("1.0.0"), v("2.0.0"))}}, "1.5.0", false},
		{"first range matches", &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{r, NewSemverRange(v("1.0.0"), v("2.0.0"))}}, "0.2.0", true},
	}
	for _, tt := range tests {
		if got := tt.filter.IsCompatible(v(tt.ver)); got != tt.want {
			t.Errorf("%s: IsCompatible(%s) = %v, want %v", tt.name, tt.ver, got, tt.want)
		}
	}
}
