//go:build crashtest

package failpoint

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct {
		spec string
		name string
		nth  int
		ok   bool
	}{
		{"ack.after_commit_record", "ack.after_commit_record", 1, true},
		{"redo.after_publish:3", "redo.after_publish", 3, true},
		{"x:0", "", 0, false},
		{"x:-1", "", 0, false},
		{"x:y", "", 0, false},
		{":2", "", 0, false},
	} {
		name, nth, err := parse(c.spec)
		if (err == nil) != c.ok || name != c.name || nth != c.nth {
			t.Errorf("parse(%q) = %q, %d, %v", c.spec, name, nth, err)
		}
	}
}
