package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "-quick"},
		{[]string{"-nope"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"-procs", "x"}, 2, "-procs"},
		{[]string{"-only", "nope", "-dir", "unused"}, 1, "unknown section"},
		{[]string{"-settle", "36s"}, 2, "-settle needs -eager-cleanup"},
		{[]string{"-eager-cleanup", "-settle", "-1s"}, 2, "-settle needs -eager-cleanup"},
		{[]string{"child"}, 2, "missing role"},
		{[]string{"child", "nope"}, 1, "unknown role"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

func TestSplit(t *testing.T) {
	if got := split(" a, ,b "); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("split = %q", got)
	}
}
