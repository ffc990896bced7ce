package provider

import "github.com/durofs/durofs/fsqueue"

// allQueued returns every message of q with its header, in name order.
func allQueued(q *fsqueue.Queue) ([]queued, error) {
	var out []queued
	err := eachQueued(q, func(m queued) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// named gives m the name its queue gives it when it is published (for tests
// that need the name first).
func named(q *fsqueue.Queue, m fsqueue.Message) fsqueue.Message {
	m.Name = q.NewName(m.VisibleAtMs, m.Attrs[attrKey])
	return m
}
