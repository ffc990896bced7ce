//go:build !linux

package vfs

func syncFS(string) error { return ErrNoBarrier }

func bootID() (string, error) { return "", ErrNoBarrier }
