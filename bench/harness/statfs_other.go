//go:build !linux

package harness

// fsType is not determined outside Linux.
func fsType(string) string { return "unknown" }

// inMemoryFS cannot tell outside Linux.
func inMemoryFS(string) bool { return false }

// flushAll does nothing outside Linux.
func flushAll() {}
