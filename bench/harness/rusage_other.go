//go:build !linux

package harness

import "syscall"

// selfPeakRSSKiB is not measured outside Linux.
func selfPeakRSSKiB() int64 { return 0 }

// childProcAttr has no special attributes outside Linux.
func childProcAttr() *syscall.SysProcAttr { return nil }
