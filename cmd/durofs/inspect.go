package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durofs/durofs/provider"
)

// The read-only inspection commands. They open the directory with
// provider.OpenReadOnly: no recovery runs and nothing is written, so they
// are safe on a live directory and show pending commits as they are.

// lsCmd is "durofs ls".
func lsCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs ls", "durofs ls [--status S] [--dir D] [--json]", `
Lists the instances (newest first) with their name, version, status, current
execution and times. An instance that was started but has no turn acked yet
(its start message is queued) is listed as Pending.`, stdout, stderr)
	status := c.fs.String("status", "", "only instances whose current status is `S`: "+strings.Join(lsStatuses, ", "))
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	if *status != "" {
		i := slices.IndexFunc(lsStatuses, func(s string) bool { return strings.EqualFold(s, *status) })
		if i < 0 {
			return c.usageErr("unknown --status %q (one of %s)", *status, strings.Join(lsStatuses, ", "))
		}
		*status = lsStatuses[i]
	}
	p, err := c.openRead()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	list, err := p.Instances(ctx, *status)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(list)
	}
	tw := c.table()
	fmt.Fprintln(tw, "INSTANCE\tNAME\tVERSION\tSTATUS\tEXEC\tCREATED\tUPDATED")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Instance, orDash(s.Name), orDash(s.Version), orDash(s.Status),
			s.CurrentExecution, fmtTime(s.CreatedAtMs), fmtTime(s.UpdatedAtMs))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d instance(s)\n", len(list))
	return exitOK
}

// lsStatuses are the values of durofs ls --status.
var lsStatuses = []string{provider.StatusRunning, provider.StatusCompleted, provider.StatusFailed, provider.StatusContinuedAsNew, provider.StatusPending}

// showCmd is "durofs show".
func showCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs show", "durofs show <instance> [--dir D] [--json]",
		`Shows one instance: its record, executions (status, output, event counts),
custom status, parent and children, lease, pending commit and queued messages.`, stdout, stderr)
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := c.openRead()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	d, err := p.InstanceDetail(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(d)
	}
	now := time.Now()
	tw := c.table()
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	row("instance", "%s", d.Instance)
	row("directory", "%s", d.Dir)
	switch {
	case d.Problem != "":
		row("instance.json", "UNREADABLE: %s", d.Problem)
	case !d.HasInstanceFile:
		row("instance.json", "none (no turn acked yet, or deleted)")
		if slices.ContainsFunc(d.Messages, func(m provider.QueuedMessage) bool { return m.Kind == "StartOrchestration" }) {
			row("status", "%s (started: its start message is queued, no turn acked yet)", provider.StatusPending)
		}
	default:
		if d.HasRecord && len(d.Workflow) > 0 {
			row("workflow", "%s (go-workflows)", d.Name)
		} else if d.HasRecord {
			row("orchestration", "%s, version %s", d.Name, d.Version)
		} else {
			row("orchestration", "- (no instance record)")
		}
		row("status", "%s (current execution %d; %d execution(s), %d event(s))", orDash(d.Status), d.CurrentExecution, d.Executions, d.TotalEvents)
		row("created", "%s", fmtTime(d.CreatedAtMs))
		row("updated", "%s", fmtTime(d.UpdatedAtMs))
		row("completed", "%s", fmtTimePtr(d.CompletedAtMs))
		if d.CustomStatus != nil {
			row("custom status", "%q (version %d)", short(*d.CustomStatus, 80), d.CustomStatusVersion)
		} else {
			row("custom status", "- (version %d)", d.CustomStatusVersion)
		}
		row("last fence", "%d", d.LastFence)
	}
	if d.Parent != nil {
		row("parent", "%s", *d.Parent)
	} else {
		row("parent", "-")
	}
	row("children", "%s", orDash(strings.Join(d.Children, ", ")))
	row("lease", "%s", describeLease(d.Lease, now))
	if pc := d.PendingCommit; pc != nil {
		row("pending commit", "%s", describeCommit(*pc))
	} else {
		row("pending commit", "none")
	}
	tw.Flush()

	fmt.Fprintln(stdout, "\nexecutions:")
	tw = c.table()
	fmt.Fprintln(tw, "  EXEC\tSTATUS\tEVENTS\tHISTORY\tSTARTED\tCOMPLETED\tOUTPUT")
	for _, e := range d.ExecutionDetails {
		status, events := e.Status, strconv.FormatUint(e.EventCount, 10)
		if !e.HasState {
			status, events = "(no state.json)", "-"
		}
		hist := strconv.Itoa(e.HistoryRecords)
		if e.TornBytes > 0 {
			hist += fmt.Sprintf(" (+%d torn bytes)", e.TornBytes)
		}
		out := "-"
		if e.Output != nil {
			out = strconv.Quote(short(*e.Output, 60))
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ExecutionID, orDash(status), events, hist, fmtTime(e.StartedAtMs), fmtTimePtr(e.CompletedAtMs), out)
		if e.Problem != "" {
			fmt.Fprintf(tw, "  \tPROBLEM: %s\n", e.Problem)
		}
	}
	tw.Flush()

	if len(d.Workflow) > 0 {
		fmt.Fprintln(stdout, "\ngo-workflows executions:")
		tw = c.table()
		fmt.Fprintln(tw, "  EXEC\tEXECUTION ID\tWORKFLOW\tQUEUE\tSTATE\tEVENTS\tLAST SEQ\tPARENT")
		for _, w := range d.Workflow {
			state := w.State
			if w.Failed {
				state += " (failed)"
			}
			parent := "-"
			if w.Parent != nil {
				parent = fmt.Sprintf("%s/%s event %d", w.Parent.InstanceID, w.Parent.ExecutionID, w.Parent.EventID)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", w.Number, w.ExecutionID, orDash(w.Name), w.Queue, state, w.Events, w.LastSequenceID, parent)
		}
		tw.Flush()
	}

	fmt.Fprintf(stdout, "\nqueued messages: %d\n", len(d.Messages))
	if len(d.Messages) > 0 {
		tw = c.table()
		fmt.Fprintln(tw, "  QUEUE\tMESSAGE\tKIND\tVISIBLE\tENQUEUED")
		for _, m := range d.Messages {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Queue, m.Name, m.Kind, visibility(m.VisibleAtMs, now), fmtTime(m.EnqueuedAtMs))
		}
		tw.Flush()
	}
	return exitOK
}

// visibility describes a message's visible_at.
func visibility(ms int64, now time.Time) string {
	if ms <= now.UnixMilli() {
		return "now"
	}
	return fmtRel(ms, now)
}

// describeLease describes an instance lease for show.
func describeLease(l *provider.LeaseInfo, now time.Time) string {
	switch {
	case l == nil:
		return "none"
	case l.State == provider.LeaseCorrupt:
		return "CORRUPT: " + l.Problem
	case l.State == provider.LeaseFree:
		return fmt.Sprintf("free (fence %d)", l.Fence)
	}
	return fmt.Sprintf("%s by %s (fence %d, %d message(s) locked, expires %s, %s)",
		l.State, l.Owner, l.Fence, l.Batch, fmtTime(l.ExpiresAtMs), fmtRel(l.ExpiresAtMs, now))
}

// describeCommit describes a pending commit (a log record still marked).
func describeCommit(pc provider.PendingCommitInfo) string {
	switch pc.Kind {
	case "prune":
		return fmt.Sprintf("prune of %d execution(s) (log record %s at %s)", pc.Events, pc.ID, pc.LSN)
	case "delete":
		return fmt.Sprintf("deletion of %d instance(s) (log record %s at %s)", len(pc.Keys), pc.ID, pc.LSN)
	case "work_ack":
		return fmt.Sprintf("ack of work item %s: %d completion(s) to publish (log record %s at %s)", pc.Key, pc.Publish, pc.ID, pc.LSN)
	case "gw":
		return fmt.Sprintf("go-workflows %s of %d instance(s), committed %s: %d event(s) to append, %d message(s) to publish, %d to delete (log record %s at %s)",
			pc.Op, len(pc.Keys), fmtTime(pc.CommittedAtMs), pc.Events, pc.Publish, pc.Delete, pc.ID, pc.LSN)
	case "gw_act":
		return fmt.Sprintf("completion of go-workflows activity task %s: %d result(s) to publish (log record %s at %s)", pc.Key, pc.Publish, pc.ID, pc.LSN)
	}
	return fmt.Sprintf("%s of execution %d, fence %d, committed %s: %d event(s), %d message(s) to publish, %d to delete (log record %s at %s)",
		pc.Kind, pc.ExecutionID, pc.Fence, fmtTime(pc.CommittedAtMs), pc.Events, pc.Publish, pc.Delete, pc.ID, pc.LSN)
}

// historyCmd is "durofs history".
func historyCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs history", "durofs history <instance> [--execution N] [--dir D] [--json]",
		`Prints one execution's history (default: the latest execution), one event a
line: event id, type and its key fields. With --json it prints each event's
JSON exactly as stored, one per line (JSON lines). A history that is not
the whole execution - a corrupt line, or fewer records than its state.json
counts as committed (see durofs fsck) - is printed as far as it reads, and
the command fails saying why.`, stdout, stderr)
	exec := c.fs.Uint64("execution", 0, "execution `N` (default: the latest)")
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := c.openRead()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	d, err := p.HistoryRecords(ctx, pos[0], *exec)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		for _, r := range d.Records {
			stdout.Write(r.Raw)
			io.WriteString(stdout, "\n")
		}
	} else {
		fmt.Fprintf(stdout, "instance %s, execution %d (%s)\n", d.Instance, d.ExecutionID, d.Path)
		tw := c.table()
		fmt.Fprintln(tw, "EVENT\tTYPE\tTIME\tDETAILS")
		for _, r := range d.Records {
			if r.Event == nil {
				fmt.Fprintf(tw, "%d\t?\t-\tUNDECODABLE: %s: %s\n", r.EventID, r.DecodeError, short(string(r.Raw), 60))
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.EventID, r.Event.Kind.Type(), fmtTime(int64(r.Event.TimestampMs)), eventDetails(*r.Event))
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d event(s)\n", len(d.Records))
	}
	if d.TornBytes > 0 {
		fmt.Fprintf(stderr, "%s: %s: %d byte(s) of torn tail after the last record ignored (durofs fsck --repair truncates them)\n", c.name, d.Path, d.TornBytes)
	}
	bad := 0
	for _, r := range d.Records {
		if r.Event == nil {
			bad++
		}
	}
	switch {
	case d.Corrupt != "":
		return c.fail(errors.New(d.Corrupt))
	case d.Missing != "":
		return c.fail(errors.New(d.Missing))
	case bad > 0:
		return c.fail(fmt.Errorf("%s: %d record(s) are not valid events", d.Path, bad))
	}
	return exitOK
}

// eventDetails lists an event's key fields.
func eventDetails(e provider.Event) string {
	var parts []string
	add := func(k string, v any) {
		switch v := v.(type) {
		case string:
			parts = append(parts, k+"="+strconv.Quote(short(v, 60)))
		case *string:
			if v != nil {
				parts = append(parts, k+"="+strconv.Quote(short(*v, 60)))
			}
		case provider.ErrorDetails:
			if v != nil {
				parts = append(parts, k+"="+strconv.Quote(short(v.DisplayMessage(), 60)))
			}
		default:
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if e.SourceEventID != nil {
		add("source", *e.SourceEventID)
	}
	switch k := e.Kind.(type) {
	case provider.OrchestrationStarted:
		add("name", k.Name)
		add("version", k.Version)
		add("input", k.Input)
		add("parent", k.ParentInstance)
	case provider.OrchestrationCompleted:
		add("output", k.Output)
	case provider.OrchestrationFailed:
		add("error", k.Details)
	case provider.ActivityScheduled:
		add("name", k.Name)
		add("input", k.Input)
		add("session", k.SessionID)
		add("tag", k.Tag)
	case provider.ActivityCompletedEvent:
		add("result", k.Result)
	case provider.ActivityFailedEvent:
		add("error", k.Details)
	case provider.ActivityCancelRequested:
		add("reason", k.Reason)
	case provider.TimerCreated:
		add("fire_at", fmtTime(int64(k.FireAtMs)))
	case provider.TimerFiredEvent:
		add("fire_at", fmtTime(int64(k.FireAtMs)))
	case provider.ExternalSubscribed:
		add("name", k.Name)
	case provider.ExternalEvent:
		add("name", k.Name)
		add("data", k.Data)
	case provider.OrchestrationChained:
		add("name", k.Name)
		add("instance", k.Instance)
		add("input", k.Input)
	case provider.SubOrchestrationScheduled:
		add("name", k.Name)
		add("instance", k.Instance)
		add("input", k.Input)
	case provider.SubOrchestrationCompleted:
		add("result", k.Result)
	case provider.SubOrchestrationFailed:
		add("error", k.Details)
	case provider.SubOrchestrationCancelRequested:
		add("reason", k.Reason)
	case provider.OrchestrationContinuedAsNew:
		add("input", k.Input)
	case provider.OrchestrationCancelRequested:
		add("reason", k.Reason)
	case provider.ExternalSubscribedCancelled:
		add("reason", k.Reason)
	case provider.QueueSubscribed:
		add("name", k.Name)
	case provider.QueueEventDelivered:
		add("name", k.Name)
		add("data", k.Data)
	case provider.QueueSubscriptionCancelled:
		add("reason", k.Reason)
	case provider.CustomStatusUpdated:
		if k.Status == nil {
			parts = append(parts, "status=null")
		} else {
			add("status", k.Status)
		}
	case provider.KeyValueSet:
		add("key", k.Key)
		add("value", k.Value)
	case provider.KeyValueCleared:
		add("key", k.Key)
	case provider.UnknownEvent:
		if d := workflowEventDetails(e); d != "" {
			parts = append(parts, d)
			break
		}
		parts = append(parts, "(event type unknown to this version; see --json)")
	}
	return strings.Join(parts, " ")
}

// queuesCmd is "durofs queues".
func queuesCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs queues", "durofs queues [--dir D] [--json]",
		`Shows each queue's depth: messages ready, locked (by an instance lease or a
work-item claim) and delayed, the age of the oldest ready message, pending
timers and the next one due, staged messages and claims; the go-workflows
queues: gw-workflow-<q> (pending events of workflow queue q, locked by a
workflow task) and gw-activity-<q> (activity tasks, locked by a claim), <q>
the queue's name encoded, or "~" and its SHA-256 for a long name (shown
after it); and
the messages queued for instances that were never started, which stay queued
until their start arrives or "durofs drain" deletes them.`, stdout, stderr)
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	p, err := c.openRead()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	st, err := p.QueueStats(ctx)
	if err != nil {
		return c.fail(err)
	}
	orphans, err := p.OrphanMessages(ctx)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(queuesReport{QueueStats: st, NeverStarted: orphans})
	}
	now := time.UnixMilli(st.AtMs)
	all := append([]provider.QueueStat{st.Orchestrator, st.Worker}, st.Workflow...)
	tw := c.table()
	fmt.Fprintln(tw, "QUEUE\tMESSAGES\tREADY\tLOCKED\tDELAYED\tOLDEST READY\tTIMERS\tNEXT TIMER\tSTAGED\tCLAIMS")
	for _, q := range all {
		oldest := "-"
		if q.OldestReadyEnqueuedAtMs != 0 {
			oldest = roundDur(now.Sub(time.UnixMilli(q.OldestReadyEnqueuedAtMs))).String()
		}
		next := "-"
		if q.NextTimerAtMs != 0 {
			next = fmtTime(q.NextTimerAtMs) + " (" + fmtRel(q.NextTimerAtMs, now) + ")"
		}
		claims := "-"
		if q.Queue == "worker" || strings.HasPrefix(q.Queue, "gw-activity-") {
			claims = strconv.Itoa(q.Claims)
			if q.Acked > 0 {
				claims += fmt.Sprintf(" (%d acked)", q.Acked)
			}
		}
		label := q.Queue
		if strings.HasPrefix(q.Queue, "gw-") && strings.Contains(q.Queue, "-~") {
			label += " (" + strconv.Quote(q.Name) + ")" // a hashed directory name: say which queue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%d\t%s\n", label, q.Messages, q.Ready, q.Locked, q.Delayed, oldest, q.Timers, next, q.Staged, claims)
	}
	tw.Flush()
	for _, q := range all {
		if len(q.Kinds) == 0 {
			continue
		}
		kinds := make([]string, 0, len(q.Kinds))
		for k, n := range q.Kinds {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(stdout, "%s by kind: %s\n", q.Queue, strings.Join(kinds, ", "))
	}
	printNeverStarted(stdout, orphans, now)
	return exitOK
}

// queuesReport is the JSON of durofs queues: the queue statistics and the
// messages for instances never started.
type queuesReport struct {
	provider.QueueStats
	NeverStarted []provider.QueuedMessage `json:"never_started"`
}

// printNeverStarted lists the messages for instances never started, by
// instance (at most maxShown instances).
func printNeverStarted(w io.Writer, msgs []provider.QueuedMessage, now time.Time) {
	if len(msgs) == 0 {
		return
	}
	type inst struct {
		id     string
		n      int
		oldest int64
	}
	var order []*inst
	by := map[string]*inst{}
	for _, m := range msgs {
		in := by[m.Instance]
		if in == nil {
			in = &inst{id: m.Instance, oldest: m.EnqueuedAtMs}
			by[m.Instance] = in
			order = append(order, in)
		}
		in.n++
		in.oldest = min(in.oldest, m.EnqueuedAtMs)
	}
	fmt.Fprintf(w, "\nmessages for instances never started: %d, for %d instance(s) (queued until their start arrives; durofs drain deletes them)\n", len(msgs), len(order))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  INSTANCE\tMESSAGES\tOLDEST")
	const maxShown = 20
	for i, in := range order {
		if i == maxShown {
			fmt.Fprintf(tw, "  (%d more)\t\t\n", len(order)-maxShown)
			break
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", short(in.id, 60), in.n, fmtRel(in.oldest, now))
	}
	tw.Flush()
}

// leasesCmd is "durofs leases".
func leasesCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs leases", "durofs leases [--all] [--dir D] [--json]",
		`Lists instance leases, work-item claims and session rows: held or expired,
their owner process and expiry. Free (released) ones are shown with --all.`, stdout, stderr)
	all := c.fs.Bool("all", false, "include free (released) leases and claims")
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	p, err := c.openRead()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	list, err := p.Leases(ctx)
	if err != nil {
		return c.fail(err)
	}
	shown := list[:0:0]
	for _, l := range list {
		if *all || l.State != provider.LeaseFree {
			shown = append(shown, l)
		}
	}
	if c.json {
		return c.printJSON(shown)
	}
	now := time.Now()
	tw := c.table()
	fmt.Fprintln(tw, "KIND\tRESOURCE\tSTATE\tOWNER\tFENCE/ATTEMPT\tEXPIRES")
	for _, l := range shown {
		res := l.Resource
		if l.Instance != "" {
			res += " (" + l.Instance + ")"
		}
		num := strconv.FormatUint(l.Fence, 10)
		if l.Kind == provider.LeaseKindWorkItem {
			num = "attempt " + strconv.FormatUint(uint64(l.Attempt), 10)
		}
		exp := "-"
		if l.ExpiresAtMs != 0 {
			exp = fmtTime(l.ExpiresAtMs) + " (" + fmtRel(l.ExpiresAtMs, now) + ")"
		}
		state := l.State
		if l.Problem != "" {
			state += ": " + l.Problem
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Kind, res, state, orDash(l.Owner), num, exp)
	}
	tw.Flush()
	counts := map[string]int{}
	for _, l := range list {
		counts[l.State]++
	}
	fmt.Fprintf(stdout, "%d held, %d expired, %d acked, %d corrupt, %d free\n",
		counts[provider.LeaseHeld], counts[provider.LeaseExpired], counts[provider.LeaseAcked], counts[provider.LeaseCorrupt], counts[provider.LeaseFree])
	return exitOK
}

// statsReport is the JSON of durofs stats.
type statsReport struct {
	Metrics struct {
		TotalInstances     uint64 `json:"total_instances"`
		TotalExecutions    uint64 `json:"total_executions"`
		RunningInstances   uint64 `json:"running_instances"`
		CompletedInstances uint64 `json:"completed_instances"`
		FailedInstances    uint64 `json:"failed_instances"`
		TotalEvents        uint64 `json:"total_events"`
		// PendingInstances were started (a start message is queued) but
		// have no turn acked yet; the other counts do not include them.
		PendingInstances uint64 `json:"pending_instances"`
	} `json:"metrics"`
	QueueDepths struct {
		Orchestrator uint64 `json:"orchestrator"`
		Worker       uint64 `json:"worker"`
		Timer        uint64 `json:"timer"`
	} `json:"queue_depths"`
	Queues         provider.QueueStats `json:"queues"`
	PendingCommits int                 `json:"pending_commits"`
	// StuckCommits are committed changes that could not be applied and were
	// moved out of the log (their instances are not served; see fsck).
	StuckCommits []provider.StuckCommit `json:"stuck_commits"`
	Disk         []provider.DirUsage    `json:"disk"`
	DiskTotal    provider.DirUsage      `json:"disk_total"`
}

// statsCmd is "durofs stats".
func statsCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs stats", "durofs stats [--dir D] [--json]",
		`Shows the system metrics (Admin get_system_metrics) and the instances started
but not yet acked (pending), the queue depths (Admin get_queue_depths and
durofs queues), pending commits and the disk usage of each area of the
directory.`, stdout, stderr)
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	p, err := c.openRead()
	if err != nil {
		return c.fail(err)
	}
	defer p.Close()
	ctx, cancel := c.context()
	defer cancel()
	var r statsReport
	m, err := p.GetSystemMetrics(ctx)
	if err != nil {
		return c.fail(err)
	}
	r.Metrics.TotalInstances, r.Metrics.TotalExecutions, r.Metrics.TotalEvents = m.TotalInstances, m.TotalExecutions, m.TotalEvents
	r.Metrics.RunningInstances, r.Metrics.CompletedInstances, r.Metrics.FailedInstances = m.RunningInstances, m.CompletedInstances, m.FailedInstances
	pending, err := p.Instances(ctx, provider.StatusPending)
	if err != nil {
		return c.fail(err)
	}
	r.Metrics.PendingInstances = uint64(len(pending))
	qd, err := p.GetQueueDepths(ctx)
	if err != nil {
		return c.fail(err)
	}
	r.QueueDepths.Orchestrator, r.QueueDepths.Worker, r.QueueDepths.Timer = qd.OrchestratorQueue, qd.WorkerQueue, qd.TimerQueue
	if r.Queues, err = p.QueueStats(ctx); err != nil {
		return c.fail(err)
	}
	pcs, err := p.PendingCommits(ctx)
	if err != nil {
		return c.fail(err)
	}
	r.PendingCommits = len(pcs)
	if r.StuckCommits, err = p.StuckCommits(ctx); err != nil {
		return c.fail(err)
	}
	if r.Disk, err = p.DiskUsage(ctx); err != nil {
		return c.fail(err)
	}
	r.DiskTotal.Area = "total"
	for _, u := range r.Disk {
		r.DiskTotal.Files += u.Files
		r.DiskTotal.Bytes += u.Bytes
	}
	if c.json {
		return c.printJSON(r)
	}
	tw := c.table()
	fmt.Fprintf(tw, "instances\t%d (running %d, completed %d, failed %d)\n", r.Metrics.TotalInstances,
		r.Metrics.RunningInstances, r.Metrics.CompletedInstances, r.Metrics.FailedInstances)
	fmt.Fprintf(tw, "pending\t%d (started: a start message is queued, no turn acked yet)\n", r.Metrics.PendingInstances)
	fmt.Fprintf(tw, "executions\t%d\n", r.Metrics.TotalExecutions)
	fmt.Fprintf(tw, "events\t%d\n", r.Metrics.TotalEvents)
	fmt.Fprintf(tw, "queue depths\torchestrator %d, worker %d (unlocked messages)\n", r.QueueDepths.Orchestrator, r.QueueDepths.Worker)
	fmt.Fprintf(tw, "timers pending\t%d\n", r.Queues.Orchestrator.Timers)
	fmt.Fprintf(tw, "pending commits\t%d\n", r.PendingCommits)
	if len(r.StuckCommits) > 0 {
		var insts []string
		for _, sc := range r.StuckCommits {
			insts = append(insts, sc.Instance)
		}
		fmt.Fprintf(tw, "stuck commits\t%d, instances not served until applied (durofs fsck): %s\n", len(r.StuckCommits), short(strings.Join(insts, ", "), 200))
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\ndisk usage:")
	tw = c.table()
	fmt.Fprintln(tw, "  AREA\tFILES\tSIZE")
	for _, u := range append(r.Disk, r.DiskTotal) {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", u.Area, u.Files, fmtBytes(u.Bytes))
	}
	tw.Flush()
	return exitOK
}

// workflowEventDetails describes a go-workflows event (type "workflow.<T>",
// stored by the goworkflows backend with the event under "event"): its
// schedule event id and attributes; "" for anything else.
func workflowEventDetails(e provider.Event) string {
	if u, ok := e.Kind.(provider.UnknownEvent); !ok || !strings.HasPrefix(u.TypeName, "workflow.") {
		return ""
	}
	var line struct {
		Event struct {
			ScheduleEventID int64           `json:"seid"`
			Attributes      json.RawMessage `json:"attr"`
		} `json:"event"`
	}
	if json.Unmarshal(e.Raw, &line) != nil {
		return ""
	}
	var parts []string
	if line.Event.ScheduleEventID != 0 {
		parts = append(parts, "schedule="+strconv.FormatInt(line.Event.ScheduleEventID, 10))
	}
	if a := string(line.Event.Attributes); a != "" && a != "{}" && a != "null" {
		parts = append(parts, short(a, 80))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
