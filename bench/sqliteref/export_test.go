package sqliteref

import "context"

// CorruptHistoryForTest overwrites every stored history event of instance
// with text that is not JSON (the conformance suite's
// corrupt_instance_history hook, as duroxide's SQLite factory does it).
func CorruptHistoryForTest(p *Provider, instance string) error {
	return p.write(context.Background(), "corrupt_history", func(t *wtx) error {
		_, err := t.exec(`UPDATE history SET event_data = 'NOT_VALID_JSON{{{' WHERE instance_id = ?`, instance)
		return err
	})
}

// MaxAttemptCountForTest returns the highest attempt count over the
// instance's orchestrator messages, locked or not.
func MaxAttemptCountForTest(p *Provider, instance string) (uint32, error) {
	var n int64
	err := p.reader(context.Background()).scan(`SELECT COALESCE(MAX(attempt_count), 0) FROM orchestrator_queue WHERE instance_id = ?`,
		[]any{instance}, &n)
	return uint32(n), err
}
