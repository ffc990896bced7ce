//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/durofs/durofs/internal/failpoint"
)

// failpointStops reports whether workers can stop themselves at failpoints
// (the crashtest build; the supervisor sees the stop in /proc).
func failpointStops() bool { return failpoint.Enabled }

// processStopped reports whether process pid is stopped (state T in
// /proc/<pid>/stat).
func processStopped(pid int) (bool, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false, err
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return data[i+2] == 'T', nil
}
