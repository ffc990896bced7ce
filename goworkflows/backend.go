package goworkflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/history"
	"github.com/cschleiden/go-workflows/backend/metadata"
	"github.com/cschleiden/go-workflows/backend/metrics"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/diag"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/durofs/durofs/provider"
)

// Options configure Open beside go-workflows' backend options.
type Options struct {
	// Provider are the options of the durofs directory (durability, file
	// modes, limits, ...). Its Logger defaults to the backend's logger and
	// its Owner to the worker name.
	Provider provider.Options
	// PollTimeout is how long GetWorkflowTask and GetActivityTask wait for
	// work before returning none (they return at once when the context
	// ends). Zero means 5 s.
	PollTimeout time.Duration
}

// Backend is a go-workflows backend (backend.Backend, diag.Backend) on a
// durofs directory. Create it with Open; several processes may open the
// same directory. It is safe for concurrent use.
type Backend struct {
	p           *provider.FSProvider
	options     *backend.Options
	workerName  string
	pollTimeout time.Duration
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ diag.Backend    = (*Backend)(nil)
)

// Open opens (creating if needed) the durofs directory dir as a
// go-workflows backend. go-workflows' backend options are honoured: the
// logger, metrics and tracer provider, the workflow and activity lock
// timeouts, the sticky timeout, the worker name, removal of
// continued-as-new executions, and the converter, propagators and history
// size limit that go-workflows' worker and client read from Options().
func Open(dir string, opts Options, backendOptions ...backend.BackendOption) (*Backend, error) {
	bo := backend.ApplyOptions(backendOptions...)
	worker := bo.WorkerName
	if worker == "" {
		worker = "worker-" + uuid.NewString()
	}
	po := opts.Provider
	if po.Logger == nil {
		po.Logger = bo.Logger
	}
	if po.Owner == "" {
		po.Owner = worker
	}
	p, err := provider.Open(dir, po)
	if err != nil {
		return nil, err
	}
	poll := opts.PollTimeout
	if poll <= 0 {
		poll = 5 * time.Second
	}
	return &Backend{p: p, options: bo, workerName: worker, pollTimeout: poll}, nil
}

// Provider returns the durofs provider underneath (the same directory can
// be inspected with its admin API and the durofs CLI).
func (b *Backend) Provider() *provider.FSProvider { return b.p }

// WorkerName is the name this backend locks tasks under.
func (b *Backend) WorkerName() string { return b.workerName }

// Close closes the directory. Locks held are not released; they expire.
func (b *Backend) Close() error { return b.p.Close() }

// FeatureSupported implements backend.Backend: every feature (expiration).
func (b *Backend) FeatureSupported(feature backend.Feature) bool { return true }

// Options implements backend.Backend.
func (b *Backend) Options() *backend.Options { return b.options }

// Metrics implements backend.Backend.
func (b *Backend) Metrics() metrics.Client {
	return b.options.Metrics.WithTags(metrics.Tags{"backend": "durofs"})
}

// Tracer implements backend.Backend.
func (b *Backend) Tracer() trace.Tracer {
	return b.options.TracerProvider.Tracer(backend.TracerName)
}

// Event conversion.

func toEvent(e *history.Event) (provider.WorkflowEvent, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return provider.WorkflowEvent{}, fmt.Errorf("encode event %s: %w", e.ID, err)
	}
	ev := provider.WorkflowEvent{
		ID: e.ID, Type: e.Type.String(), SequenceID: e.SequenceID, ScheduleEventID: e.ScheduleEventID,
		TimestampMs: e.Timestamp.UnixMilli(), Data: data,
	}
	if e.VisibleAt != nil {
		ev.VisibleAtMs = max(e.VisibleAt.UnixMilli(), 1)
	}
	return ev, nil
}

func toEvents(es []*history.Event) ([]provider.WorkflowEvent, error) {
	out := make([]provider.WorkflowEvent, len(es))
	for i, e := range es {
		ev, err := toEvent(e)
		if err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

func fromEvent(ev provider.WorkflowEvent) (*history.Event, error) {
	var e history.Event
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return nil, fmt.Errorf("decode event %s: %w", ev.ID, err)
	}
	return &e, nil
}

func fromEvents(evs []provider.WorkflowEvent) ([]*history.Event, error) {
	out := make([]*history.Event, 0, len(evs))
	for _, ev := range evs {
		e, err := fromEvent(ev)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func startOf(instance *core.WorkflowInstance, a *history.ExecutionStartedAttributes, defaultQueue core.Queue) (provider.WorkflowStart, error) {
	q := a.Queue
	if q == "" {
		q = defaultQueue
	}
	if q == "" {
		q = core.QueueDefault
	}
	md, err := json.Marshal(a.Metadata)
	if err != nil {
		return provider.WorkflowStart{}, fmt.Errorf("encode metadata: %w", err)
	}
	s := provider.WorkflowStart{Queue: string(q), Name: a.Name, Metadata: md}
	if instance.Parent != nil {
		s.Parent = &provider.WorkflowParent{InstanceID: instance.Parent.InstanceID, ExecutionID: instance.Parent.ExecutionID, EventID: instance.ParentEventID}
	}
	return s, nil
}

func instanceOf(x provider.WorkflowExecution) *core.WorkflowInstance {
	if x.Parent != nil {
		return core.NewSubWorkflowInstance(x.InstanceID, x.ExecutionID,
			core.NewWorkflowInstance(x.Parent.InstanceID, x.Parent.ExecutionID), x.Parent.EventID)
	}
	return core.NewWorkflowInstance(x.InstanceID, x.ExecutionID)
}

func ref(instance *core.WorkflowInstance) provider.WorkflowRef {
	return provider.WorkflowRef{InstanceID: instance.InstanceID, ExecutionID: instance.ExecutionID}
}

// mapErr turns the provider's workflow errors into go-workflows' sentinels
// (returned as they are: callers compare them with ==).
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, provider.ErrWorkflowNotFound):
		return backend.ErrInstanceNotFound
	case errors.Is(err, provider.ErrWorkflowExists):
		return backend.ErrInstanceAlreadyExists
	case errors.Is(err, provider.ErrWorkflowNotFinished):
		return backend.ErrInstanceNotFinished
	}
	return err
}

// CreateWorkflowInstance implements backend.Backend.
func (b *Backend) CreateWorkflowInstance(ctx context.Context, instance *workflow.Instance, event *history.Event) error {
	a, ok := event.Attributes.(*history.ExecutionStartedAttributes)
	if !ok {
		return fmt.Errorf("durofs: create workflow instance: event is %v, not WorkflowExecutionStarted", event.Type)
	}
	s, err := startOf(instance, a, core.QueueDefault)
	if err != nil {
		return err
	}
	ev, err := toEvent(event)
	if err != nil {
		return err
	}
	return mapErr(b.p.CreateWorkflow(ctx, ref(instance), s, ev))
}

// CancelWorkflowInstance implements backend.Backend: the cancellation event
// becomes a pending event of the execution (ErrInstanceNotFound if unknown).
func (b *Backend) CancelWorkflowInstance(ctx context.Context, instance *workflow.Instance, cancelEvent *history.Event) error {
	ev, err := toEvent(cancelEvent)
	if err != nil {
		return err
	}
	if instance.ExecutionID == "" {
		return backend.ErrInstanceNotFound
	}
	return mapErr(b.p.SendWorkflowEvent(ctx, instance.InstanceID, instance.ExecutionID, ev))
}

// SignalWorkflow implements backend.Backend: the signal becomes a pending
// event of the instance's active execution (ErrInstanceNotFound if none).
func (b *Backend) SignalWorkflow(ctx context.Context, instanceID string, event *history.Event) error {
	ev, err := toEvent(event)
	if err != nil {
		return err
	}
	return mapErr(b.p.SendWorkflowEvent(ctx, instanceID, "", ev))
}

// RemoveWorkflowInstance implements backend.Backend.
func (b *Backend) RemoveWorkflowInstance(ctx context.Context, instance *workflow.Instance) error {
	return mapErr(b.p.RemoveWorkflow(ctx, ref(instance)))
}

// RemoveWorkflowInstances implements backend.Backend: executions finished
// before the given time, in atomic batches.
func (b *Backend) RemoveWorkflowInstances(ctx context.Context, options ...backend.RemovalOption) error {
	ro := backend.DefaultRemovalOptions
	for _, o := range options {
		o(&ro)
	}
	_, err := b.p.RemoveWorkflows(ctx, ro.FinishedBefore, ro.BatchSize)
	return mapErr(err)
}

// GetWorkflowInstanceState implements backend.Backend.
func (b *Backend) GetWorkflowInstanceState(ctx context.Context, instance *workflow.Instance) (core.WorkflowInstanceState, error) {
	x, err := b.p.WorkflowExecutionInfo(ctx, ref(instance))
	if err != nil {
		return core.WorkflowInstanceStateActive, mapErr(err)
	}
	return core.WorkflowInstanceState(x.State), nil
}

// GetWorkflowInstanceHistory implements backend.Backend (an unknown
// execution has an empty history).
func (b *Backend) GetWorkflowInstanceHistory(ctx context.Context, instance *workflow.Instance, lastSequenceID *int64) ([]*history.Event, error) {
	evs, err := b.p.WorkflowHistory(ctx, ref(instance), lastSequenceID)
	if errors.Is(err, provider.ErrWorkflowNotFound) {
		return []*history.Event{}, nil
	}
	if err != nil {
		return nil, err
	}
	return fromEvents(evs)
}

func queueNames(queues []workflow.Queue) []string {
	out := make([]string, len(queues))
	for i, q := range queues {
		out[i] = string(q)
	}
	return out
}

// PrepareWorkflowQueues implements backend.Backend.
func (b *Backend) PrepareWorkflowQueues(ctx context.Context, queues []workflow.Queue) error {
	return b.p.PrepareWorkflowQueues(queueNames(queues), false)
}

// PrepareActivityQueues implements backend.Backend.
func (b *Backend) PrepareActivityQueues(ctx context.Context, queues []workflow.Queue) error {
	return b.p.PrepareWorkflowQueues(queueNames(queues), true)
}

// GetWorkflowTask implements backend.Backend. It waits for a task up to
// Options.PollTimeout or until ctx ends, then returns (nil, nil).
func (b *Backend) GetWorkflowTask(ctx context.Context, queues []workflow.Queue) (*backend.WorkflowTask, error) {
	t, err := b.p.FetchWorkflowTask(ctx, queueNames(queues), b.workerName, b.options.WorkflowLockTimeout, b.pollTimeout)
	if err != nil || t == nil {
		return nil, err
	}
	x := t.Execution
	events, err := fromEvents(t.NewEvents)
	if err != nil {
		return nil, err
	}
	var md *metadata.WorkflowMetadata
	if len(x.Metadata) > 0 {
		if err := json.Unmarshal(x.Metadata, &md); err != nil {
			return nil, fmt.Errorf("durofs: decode workflow metadata: %w", err)
		}
	}
	return &backend.WorkflowTask{
		ID:                    x.InstanceID,
		Queue:                 workflow.Queue(x.Queue),
		WorkflowInstance:      instanceOf(x),
		WorkflowInstanceState: core.WorkflowInstanceState(x.State),
		Metadata:              md,
		LastSequenceID:        x.LastSequenceID,
		NewEvents:             events,
		CustomData:            t,
	}, nil
}

func taskOf(task *backend.WorkflowTask) (*provider.WorkflowTask, error) {
	t, ok := task.CustomData.(*provider.WorkflowTask)
	if !ok {
		return nil, errors.New("durofs: workflow task was not fetched from this backend")
	}
	return t, nil
}

// ExtendWorkflowTask implements backend.Backend.
func (b *Backend) ExtendWorkflowTask(ctx context.Context, task *backend.WorkflowTask) error {
	t, err := taskOf(task)
	if err != nil {
		return err
	}
	return b.p.ExtendWorkflowTask(ctx, t.Token, b.options.WorkflowLockTimeout)
}

// CompleteWorkflowTask implements backend.Backend: everything in one
// durofs commit (see doc.go).
func (b *Backend) CompleteWorkflowTask(ctx context.Context, task *backend.WorkflowTask, state core.WorkflowInstanceState,
	executedEvents, activityEvents, timerEvents []*history.Event, workflowEvents []*history.WorkflowEvent) error {
	t, err := taskOf(task)
	if err != nil {
		return err
	}
	res := provider.WorkflowTaskResult{
		State:           provider.WorkflowState(state),
		Worker:          b.workerName,
		Sticky:          b.options.StickyTimeout,
		RemoveExecution: b.options.RemoveContinuedAsNewInstances && state == core.WorkflowInstanceStateContinuedAsNew,
	}
	if res.Executed, err = toEvents(executedEvents); err != nil {
		return err
	}
	for _, e := range executedEvents {
		switch e.Type {
		case history.EventType_TimerCanceled:
			res.CanceledTimers = append(res.CanceledTimers, e.ScheduleEventID)
		case history.EventType_WorkflowExecutionFinished:
			if a, ok := e.Attributes.(*history.ExecutionCompletedAttributes); ok && a.Error != nil {
				res.Failed = true
			}
		}
	}
	for _, e := range activityEvents {
		a, ok := e.Attributes.(*history.ActivityScheduledAttributes)
		if !ok {
			return fmt.Errorf("durofs: activity event %s is %v, not ActivityScheduled", e.ID, e.Type)
		}
		payload, err := json.Marshal(activityPayload{Instance: task.WorkflowInstance, Event: e})
		if err != nil {
			return err
		}
		res.Activities = append(res.Activities, provider.WorkflowActivity{Queue: string(a.Queue), EventID: e.ID, Payload: payload})
	}
	if res.Timers, err = toEvents(timerEvents); err != nil {
		return err
	}
	// Events by target execution, in the order of their first appearance.
	idx := map[provider.WorkflowRef]int{}
	for _, we := range workflowEvents {
		r := ref(we.WorkflowInstance)
		i, seen := idx[r]
		if !seen {
			i = len(res.Sends)
			idx[r] = i
			send := provider.WorkflowSend{Target: r}
			if we.HistoryEvent.Type == history.EventType_WorkflowExecutionStarted {
				a, ok := we.HistoryEvent.Attributes.(*history.ExecutionStartedAttributes)
				if !ok {
					return fmt.Errorf("durofs: start event %s has attributes %T", we.HistoryEvent.ID, we.HistoryEvent.Attributes)
				}
				s, err := startOf(we.WorkflowInstance, a, task.Queue)
				if err != nil {
					return err
				}
				send.Start = &s
				failed, err := toEvent(history.NewPendingEvent(time.Now(), history.EventType_SubWorkflowFailed,
					&history.SubWorkflowFailedAttributes{Error: workflowErrorOf(backend.ErrInstanceAlreadyExists)},
					history.ScheduleEventID(we.WorkflowInstance.ParentEventID)))
				if err != nil {
					return err
				}
				send.OnExists = &failed
			}
			res.Sends = append(res.Sends, send)
		}
		ev, err := toEvent(we.HistoryEvent)
		if err != nil {
			return err
		}
		res.Sends[i].Events = append(res.Sends[i].Events, ev)
	}
	if err := b.p.CompleteWorkflowTask(ctx, t, res); err != nil {
		if errors.Is(err, provider.ErrWorkflowTaskLost) {
			return fmt.Errorf("durofs: could not complete workflow task of %s: %w", task.WorkflowInstance.InstanceID, err)
		}
		return err
	}
	return nil
}

// activityPayload is what an activity task's message holds.
type activityPayload struct {
	Instance *core.WorkflowInstance `json:"instance"`
	Event    *history.Event         `json:"event"`
}

// GetActivityTask implements backend.Backend. It waits for a task up to
// Options.PollTimeout or until ctx ends, then returns (nil, nil).
func (b *Backend) GetActivityTask(ctx context.Context, queues []workflow.Queue) (*backend.ActivityTask, error) {
	t, err := b.p.FetchWorkflowActivity(ctx, queueNames(queues), b.workerName, b.options.ActivityLockTimeout, b.pollTimeout)
	if err != nil || t == nil {
		return nil, err
	}
	var pl activityPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil || pl.Event == nil || pl.Instance == nil {
		return nil, fmt.Errorf("durofs: activity task %s does not decode: %v", t.Token, err)
	}
	return &backend.ActivityTask{
		ID:               t.Token,
		ActivityID:       pl.Event.ID,
		Queue:            workflow.Queue(t.Queue),
		WorkflowInstance: pl.Instance,
		Event:            pl.Event,
	}, nil
}

// ExtendActivityTask implements backend.Backend.
func (b *Backend) ExtendActivityTask(ctx context.Context, task *backend.ActivityTask) error {
	return b.p.ExtendWorkflowActivity(ctx, task.ID, b.options.ActivityLockTimeout)
}

// CompleteActivityTask implements backend.Backend: deleting the task and
// delivering the result to the execution is one durofs commit.
func (b *Backend) CompleteActivityTask(ctx context.Context, task *backend.ActivityTask, result *history.Event) error {
	ev, err := toEvent(result)
	if err != nil {
		return err
	}
	return b.p.CompleteWorkflowActivity(ctx, task.ID, ev)
}

// GetStats implements backend.Backend.
func (b *Backend) GetStats(ctx context.Context) (*backend.Stats, error) {
	st, err := b.p.WorkflowStats(ctx)
	if err != nil {
		return nil, err
	}
	s := &backend.Stats{
		ActiveWorkflowInstances: st.ActiveExecutions,
		PendingWorkflowTasks:    map[workflow.Queue]int64{},
		PendingActivityTasks:    map[workflow.Queue]int64{},
	}
	for q, n := range st.ReadyTasks {
		s.PendingWorkflowTasks[workflow.Queue(q)] = n
	}
	for q, n := range st.ActivityTasks {
		s.PendingActivityTasks[workflow.Queue(q)] = n
	}
	return s, nil
}

// GetFutureEvents returns the pending future events (timers) of every
// execution (go-workflows' test.TestBackend).
func (b *Backend) GetFutureEvents(ctx context.Context) ([]*history.Event, error) {
	evs, err := b.p.FutureWorkflowEvents(ctx)
	if err != nil {
		return nil, err
	}
	return fromEvents(evs)
}

// workflowErrorOf is go-workflows' error value for err, as its own
// backends record it.
func workflowErrorOf(err error) *workflow.Error {
	var we *workflow.Error
	if errors.As(workflow.NewError(err), &we) {
		return we
	}
	return &workflow.Error{Type: "error", Message: err.Error()}
}
