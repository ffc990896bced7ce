package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/durofs/durofs/provider"
)

// The commands that change a directory through the Admin API. They open it
// with provider.Open (which first recovers whatever a dead process left).

// deleteResult is the JSON of durofs delete.
type deleteResult struct {
	Instance             string `json:"instance"`
	InstancesDeleted     uint64 `json:"instances_deleted"`
	ExecutionsDeleted    uint64 `json:"executions_deleted"`
	EventsDeleted        uint64 `json:"events_deleted"`
	QueueMessagesDeleted uint64 `json:"queue_messages_deleted"`
}

// deleteCmd is "durofs delete".
func deleteCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs delete", "durofs delete <instance> [--force] [--dir D] [--json]", `
Deletes a root instance with all its sub-orchestrations, atomically: their
executions, histories and queued messages (Admin delete_instance). A running
instance is refused unless --force. An id without an instance record (only
leftover messages, say) has its messages deleted.`, stdout, stderr)
	force := c.fs.Bool("force", false, "delete even if an instance is still running")
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := c.openWrite()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	id := pos[0]
	res, err := p.DeleteInstance(ctx, id, *force)
	if errors.Is(err, provider.ErrNotFound) {
		// No instance record: delete whatever the id still has (messages,
		// a history appended without an ack).
		res, err = p.DeleteInstancesAtomic(ctx, []string{id}, *force)
		if err == nil && res == (provider.DeleteInstanceResult{}) {
			err = fmt.Errorf("instance %q not found in %s", id, c.dir)
		}
	}
	if err != nil {
		return c.fail(err)
	}
	out := deleteResult{Instance: id, InstancesDeleted: res.InstancesDeleted, ExecutionsDeleted: res.ExecutionsDeleted,
		EventsDeleted: res.EventsDeleted, QueueMessagesDeleted: res.QueueMessagesDeleted}
	if c.json {
		return c.printJSON(out)
	}
	fmt.Fprintf(stdout, "deleted %s: %d instance(s), %d execution(s), %d event(s), %d queued message(s)\n",
		id, res.InstancesDeleted, res.ExecutionsDeleted, res.EventsDeleted, res.QueueMessagesDeleted)
	return exitOK
}

// pruneResult is the JSON of durofs prune.
type pruneResult struct {
	InstancesProcessed uint64 `json:"instances_processed"`
	ExecutionsDeleted  uint64 `json:"executions_deleted"`
	EventsDeleted      uint64 `json:"events_deleted"`
}

// pruneCmd is "durofs prune".
func pruneCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs prune", "durofs prune <instance>|--all [--keep-last N] [--completed-before T] [--dir D] [--json]", `
Deletes old executions of one instance, or of every instance with --all
(Admin prune_executions): the current execution and running executions are
always kept. --keep-last keeps the N most recent executions; --completed-before
prunes only executions that completed before T. Both criteria apply together.`, stdout, stderr)
	all := c.fs.Bool("all", false, "prune every instance")
	keepLast := c.fs.Int("keep-last", -1, "keep the `N` most recent executions (default: only the current one)")
	before := c.fs.String("completed-before", "", "prune only executions completed before `T` (RFC 3339 time, or Unix milliseconds)")
	pos, code, ok := c.parse(args, 0, 1)
	if !ok {
		return code
	}
	if *all == (len(pos) == 1) {
		return c.usageErr("give either an instance or --all")
	}
	var opts provider.PruneOptions
	if *keepLast >= 0 {
		if uint64(*keepLast) > math.MaxUint32 {
			return c.usageErr("--keep-last %d is too large", *keepLast)
		}
		n := uint32(*keepLast)
		opts.KeepLast = &n
	}
	if *before != "" {
		ms, err := parseTimeArg(*before)
		if err != nil {
			return c.usageErr("--completed-before: %v", err)
		}
		opts.CompletedBeforeMs = &ms
	}
	p, err := c.openWrite()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	var res provider.PruneResult
	if *all {
		limit := uint32(math.MaxUint32)
		res, err = p.PruneExecutionsBulk(ctx, provider.InstanceFilter{Limit: &limit}, opts)
	} else {
		res, err = p.PruneExecutions(ctx, pos[0], opts)
	}
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(pruneResult{InstancesProcessed: res.InstancesProcessed, ExecutionsDeleted: res.ExecutionsDeleted, EventsDeleted: res.EventsDeleted})
	}
	fmt.Fprintf(stdout, "pruned %d execution(s) (%d event(s)) in %d instance(s)\n", res.ExecutionsDeleted, res.EventsDeleted, res.InstancesProcessed)
	return exitOK
}

// parseTimeArg parses an RFC 3339 time or Unix milliseconds.
func parseTimeArg(s string) (uint64, error) {
	if ms, err := strconv.ParseUint(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither an RFC 3339 time nor Unix milliseconds", s)
	}
	if t.UnixMilli() < 0 {
		return 0, fmt.Errorf("%q is before 1970", s)
	}
	return uint64(t.UnixMilli()), nil
}

// drainResult is the JSON of durofs drain.
type drainResult struct {
	Drained   int                      `json:"drained"`
	Instances int                      `json:"instances"`
	Messages  []provider.QueuedMessage `json:"messages"`
}

// drainCmd is "durofs drain".
func drainCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs drain", "durofs drain [<instance>...] [--older-than D] [--dir D] [--json]", `
Deletes the messages queued for instances that were never started (listed by
durofs queues): those of the given instances, or of every such instance. A
fetch leaves them queued because their start may still come. They are
deleted in one commit, decided under each instance's lock: an instance whose
start has been queued since, or that has started, keeps its messages.`, stdout, stderr)
	olderThan := c.fs.Duration("older-than", 0, "only messages enqueued at least `D` ago (e.g. 1h)")
	pos, code, ok := c.parse(args, 0, -1)
	if !ok {
		return code
	}
	if *olderThan < 0 {
		return c.usageErr("--older-than %v is negative", *olderThan)
	}
	p, err := c.openWrite()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	msgs, err := p.DrainOrphanMessages(ctx, pos, *olderThan)
	if err != nil {
		return c.fail(err)
	}
	insts := map[string]bool{}
	for _, m := range msgs {
		insts[m.Instance] = true
	}
	out := drainResult{Drained: len(msgs), Instances: len(insts), Messages: msgs}
	if out.Messages == nil {
		out.Messages = []provider.QueuedMessage{}
	}
	if c.json {
		return c.printJSON(out)
	}
	fmt.Fprintf(stdout, "drained %d message(s) of %d instance(s) never started\n", out.Drained, out.Instances)
	return exitOK
}
