//go:build !unix

package main

import "testing"

// fsckUnreadable skips: making a file unreadable is a unix permission bit.
func fsckUnreadable(t *testing.T, bin, d string) (stdout string, code int) {
	t.Skip("needs unix permissions")
	return "", 0
}
