//go:build unix && !linux

package main

import "errors"

// failpointStops reports whether workers can stop themselves at failpoints:
// not here (the supervisor reads the process state from /proc).
func failpointStops() bool { return false }

// processStopped is not implemented outside Linux.
func processStopped(int) (bool, error) { return false, errors.New("no /proc") }
