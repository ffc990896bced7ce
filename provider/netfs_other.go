//go:build !linux

package provider

// networkFS cannot tell on this platform; the README says network file
// systems are unsupported.
func networkFS(string) (string, error) { return "", nil }
