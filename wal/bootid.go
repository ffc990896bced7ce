package wal

import (
	"os"
	"strings"
)

// LinuxBootID reads /proc/sys/kernel/random/boot_id, a random id the kernel
// chooses at every boot (elsewhere it fails: the boot is unknown).
func LinuxBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
