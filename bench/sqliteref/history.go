package sqliteref

import (
	"context"
	"database/sql"
	"errors"
	"math"

	"github.com/durofs/durofs/provider"
)

// Read implements provider.Provider: the history of the instance's latest
// execution (empty if the instance is unknown).
func (p *Provider) Read(ctx context.Context, instance string) ([]provider.Event, error) {
	const op = "read"
	var events []provider.Event
	err := p.read(ctx, op, func(r *runner) error {
		var latest sql.NullInt64
		if err := r.scan(sqlLatestExecution, []any{instance}, &latest); err != nil {
			return err
		}
		if !latest.Valid {
			events = []provider.Event{}
			return nil
		}
		var err error
		events, err = readExec(r, op, instance, uint64(latest.Int64))
		return err
	})
	return events, err
}

// ReadWithExecution implements provider.Provider.
func (p *Provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	const op = "read_with_execution"
	var events []provider.Event
	err := p.read(ctx, op, func(r *runner) error {
		var err error
		events, err = readExec(r, op, instance, executionID)
		return err
	})
	return events, err
}

// readExec reads one execution's history; undecodable history is a
// permanent ErrCorrupt.
func readExec(r *runner, op, instance string, exec uint64) ([]provider.Event, error) {
	events, historyErr, err := readHistory(r, instance, exec)
	if err != nil {
		return nil, err
	}
	if historyErr != nil {
		return nil, provider.Permanentf(op, provider.ErrCorrupt, "%s", *historyErr)
	}
	return events, nil
}

// AppendWithExecution implements provider.Provider: a test and debugging
// path that appends events outside any turn. An event id of 0 or one that
// exists already fails with nothing written. Like duroxide's SQLite
// provider (and durofs) it creates no execution record.
func (p *Provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []provider.Event) error {
	const op = "append_with_execution"
	if executionID > math.MaxInt64 {
		return provider.Permanentf(op, provider.ErrInvalidEvent, "execution_id %d is out of range", executionID)
	}
	enc, err := encodeEvents(op, events)
	if err != nil {
		return err
	}
	if len(enc) == 0 {
		return p.check(ctx, op)
	}
	return p.write(ctx, op, func(t *wtx) error {
		return insertEvents(t, op, instance, int64(executionID), enc)
	})
}

// GetCustomStatus implements provider.Provider. The status lives on the
// instance record; its version grows by one per ack whose history delta
// carries a CustomStatusUpdated event.
func (p *Provider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*provider.CustomStatus, error) {
	const op = "get_custom_status"
	if err := p.check(ctx, op); err != nil {
		return nil, err
	}
	var (
		status  sql.NullString
		version int64
	)
	err := p.reader(ctx).scan(`SELECT custom_status, custom_status_version FROM instances WHERE instance_id = ?`, []any{instance}, &status, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, p.classify(op, err)
	}
	if version <= 0 || uint64(version) <= lastSeenVersion {
		return nil, nil
	}
	return &provider.CustomStatus{Status: strPtr(status), Version: uint64(version)}, nil
}
