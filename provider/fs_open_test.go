package provider

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestOpenFormat(t *testing.T) {
	cases := []struct {
		name    string
		format  string // "" = no FORMAT file
		wantErr bool
	}{
		{"fresh directory", "", false},
		{"current version", `{"format":"durofs","version":1}`, false},
		{"future major version", `{"format":"durofs","version":2}`, true},
		{"not durofs", `{"format":"other","version":1}`, true},
		{"garbage", `not json`, true},
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
			if c.wantErr {
				if err == nil || !errors.Is(err, ErrUnsupportedFS) {
					p.Close()
					t.Fatalf("Open = %v, want an ErrUnsupportedFS error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
			// Reopening works and keeps the FORMAT file.
			p2, err := Open(dir, Options{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			p2.Close()
		})
	}
}
