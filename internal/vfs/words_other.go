//go:build !linux

package vfs

import "os"

func mapOS(*os.File, int) (Words, error) { return nil, ErrNoMap }
