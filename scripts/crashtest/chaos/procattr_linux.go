//go:build linux

package main

import "syscall"

// sysProcAttr puts a worker in its own process group (a Ctrl-C reaches only
// the supervisor, which then stops the workers itself) and has the kernel
// SIGKILL it if the supervisor dies, even while it is stopped (SIGSTOP)
// and cannot notice by itself.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
