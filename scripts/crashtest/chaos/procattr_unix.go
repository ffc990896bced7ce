//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts a worker in its own process group (a Ctrl-C reaches only
// the supervisor, which then stops the workers itself). Workers notice a
// dead supervisor by polling their parent pid (watchParent).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
