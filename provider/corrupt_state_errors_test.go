package provider

import (
	"context"
	"errors"
	"testing"
)

// TestCorruptStateFilesArePermanentErrors: an instance.json or state.json
// that does not decode is reported by the read and management calls as a
// permanent ErrCorrupt, as an undecodable history is (contract §4:
// corruption, "invalid format", is permanent): a caller that retries
// retryable errors (duroxide's client passes is_retryable through) would
// retry forever on a file that never decodes.
func TestCorruptStateFilesArePermanentErrors(t *testing.T) {
	ctx := context.Background()
	p := openManualQuiet(t)
	createInstance(t, p, "bad-inst") // Completed, record and execution 1
	createInstance(t, p, "bad-exec")
	mustNoErr(t, writeFileForTest(p, p.instFilePath(instanceKey("bad-inst")), []byte("not json{{{")))
	mustNoErr(t, writeFileForTest(p, p.execStatePath(instanceKey("bad-exec"), 1), []byte("not json{{{")))

	calls := map[string]func() error{
		"GetInstanceInfo": func() error { _, err := p.GetInstanceInfo(ctx, "bad-inst"); return err },
		"Read":            func() error { _, err := p.Read(ctx, "bad-inst"); return err },
		"GetParentID":     func() error { _, _, err := p.GetParentID(ctx, "bad-inst"); return err },
		"DeleteInstance":  func() error { _, err := p.DeleteInstance(ctx, "bad-inst", true); return err },
		"PruneExecutions": func() error { _, err := p.PruneExecutions(ctx, "bad-inst", PruneOptions{}); return err },
		"GetCustomStatus": func() error { _, err := p.GetCustomStatus(ctx, "bad-inst", 0); return err },
		"GetExecutionInfo": func() error {
			_, err := p.GetExecutionInfo(ctx, "bad-exec", 1)
			return err
		},
		"GetInstanceInfo(state.json)": func() error { _, err := p.GetInstanceInfo(ctx, "bad-exec"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if err == nil {
				t.Fatalf("%s on an undecodable file: no error", name)
			}
			if IsRetryable(err) || !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s on an undecodable file: %q (retryable=%v); want a permanent ErrCorrupt (contract §4)", name, err, IsRetryable(err))
			}
		})
	}
}

// TestStorageErrorsStayRetryable: storageErrf makes only corruption
// permanent; an I/O error reading an instance's files may pass, and stays
// retryable.
func TestStorageErrorsStayRetryable(t *testing.T) {
	io := errors.New("read instance.json: input/output error")
	if err := storageErrf("read", io, "%v", io); !IsRetryable(err) || !errors.Is(err, io) {
		t.Errorf("an I/O error: %v (retryable=%v), want retryable, wrapping its cause", err, IsRetryable(err))
	}
	corrupt := errors.Join(ErrCorrupt, errors.New("bad seal"))
	if err := storageErrf("read", corrupt, "%v", corrupt); IsRetryable(err) || !errors.Is(err, ErrCorrupt) {
		t.Errorf("corruption: %v (retryable=%v), want permanent ErrCorrupt", err, IsRetryable(err))
	}
}
