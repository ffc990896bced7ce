package goworkflows

import (
	"testing"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/test"
	"github.com/stretchr/testify/require"

	"github.com/durofs/durofs/provider"
)

// modes are the durability modes the suites run in.
var modes = []provider.Durability{provider.Durable, provider.ProcessCrashSafe}

func factory(t *testing.T, mode provider.Durability) func(options ...backend.BackendOption) test.TestBackend {
	return func(options ...backend.BackendOption) test.TestBackend {
		b, err := Open(t.TempDir(), Options{Provider: provider.Options{Durability: mode}}, options...)
		require.NoError(t, err)
		return b
	}
}

func teardown(t *testing.T) func(b test.TestBackend) {
	return func(b test.TestBackend) { require.NoError(t, b.Close()) }
}

// TestBackend runs go-workflows' backend suite (test.BackendTest, v1.2.0,
// unmodified) against durofs in both durability modes.
func TestBackend(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			test.BackendTest(t, factory(t, mode), teardown(t))
		})
	}
}

// TestEndToEndBackend runs go-workflows' end-to-end suite
// (test.EndToEndBackendTest, v1.2.0, unmodified) against durofs in both
// durability modes.
func TestEndToEndBackend(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			test.EndToEndBackendTest(t, factory(t, mode), teardown(t))
		})
	}
}
