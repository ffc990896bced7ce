package provider

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenFormat: Open creates FORMAT (version 2) in a fresh directory and
// reopens a current one; it refuses, with an error wrapping
// ErrUnsupportedFS, a FORMAT of version 1 (saying what to do with it), of a
// future version or of another kind, and creates nothing in a directory it
// refuses.
func TestOpenFormat(t *testing.T) {
	cases := []struct {
		name    string
		format  string // "" = no FORMAT file
		wantErr string // "" = Open succeeds; else a part of the error
	}{
		{"fresh directory", "", ""},
		{"current version", `{"format":"durofs","version":2}`, ""},
		{"version 1 (commit records)", `{"format":"durofs","version":1}`, "format version 1 (per-instance commit records) is not read by this build, which commits through a write-ahead log (version 2); finish the directory's work with durofs 0.1"},
		{"future major version", `{"format":"durofs","version":3}`, "format version 3 (this build reads version 2)"},
		{"not durofs", `{"format":"other","version":2}`, "is not a durofs FORMAT file"},
		{"garbage", `not json`, "is not a durofs FORMAT file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.format != "" {
				if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(c.format), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Open(dir, Options{SweepInterval: -1})
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrUnsupportedFS) || !strings.Contains(err.Error(), c.wantErr) {
					if p != nil {
						p.Close()
					}
					t.Fatalf("Open = %v, want an ErrUnsupportedFS error saying %q", err, c.wantErr)
				}
				// Refused before anything was created.
				if names, _ := os.ReadDir(dir); len(names) != 1 {
					t.Errorf("a refused Open changed the directory: %v", names)
				}
				if data, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(data) != c.format {
					t.Errorf("a refused Open changed FORMAT: %q", data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
			data, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
			if err != nil || (c.format != "" && string(data) != c.format) || !strings.Contains(string(data), `"version":2`) {
				t.Fatalf("FORMAT = %q, %v; want version 2", data, err)
			}
			// Reopening works and keeps the FORMAT file.
			p2, err := Open(dir, Options{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			p2.Close()
			if again, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(again) != string(data) {
				t.Fatalf("FORMAT changed by a reopen: %q, was %q", again, data)
			}
		})
	}
}
