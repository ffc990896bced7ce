// Package goworkflows is a backend for go-workflows
// (github.com/cschleiden/go-workflows, v1.2.0) that keeps everything in a
// durofs directory, on durofs's own engine: the same directory layout,
// write-ahead log, leases, flock fences and ULID-named queue files as durofs's
// orchestrations, with the same crash guarantees in both durability modes
// (kill -9 of any process at any instant; with provider.Durable also power
// loss). Several OS processes may run go-workflows workers and clients on
// one directory at once.
//
//	b, err := goworkflows.Open("/var/lib/app/wf", goworkflows.Options{}, backend.WithWorkerName("w1"))
//	w := worker.New(b, nil)
//	c := client.New(b)
//
// Open returns a *Backend, which implements backend.Backend and diag.Backend
// (and test.TestBackend's GetFutureEvents). go-workflows' backend options
// are honoured: logger (also durofs's logger), metrics, tracer provider,
// WorkflowLockTimeout and ActivityLockTimeout (the lease and claim lengths),
// StickyTimeout, WorkerName (the lease and claim owner; default
// "worker-<uuid>"), RemoveContinuedAsNewInstances, and the converter,
// propagators and MaxHistorySize that go-workflows itself reads from
// Options(). Options.Provider selects durofs's options (Durability, modes,
// limits), Options.PollTimeout how long a fetch long-polls.
//
// go-workflows' own suites, test.BackendTest and test.EndToEndBackendTest of
// v1.2.0, imported unmodified, run against this backend in both durability
// modes with -race (backend_test.go, make test).
//
// # The model, and where it lives
//
// go-workflows names an execution by (instance id, execution id), both
// strings; an instance id has at most one active execution (continue-as-new
// and re-use of a finished id add executions). Executions wake on "pending
// events" (some in the future: timers), execute them in a workflow task, and
// append the executed events to a history numbered by sequence id. Activity
// tasks live in named queues; so do workflow executions.
//
// Nothing of this is a second store: the engine operations live in durofs's
// provider package (provider/fs_gw*.go) and commit through the write-ahead
// log like an orchestration ack. This package only converts go-workflows
// types. The provider does not import go-workflows (its go.mod keeps its
// four dependencies): events are opaque JSON to it, with the few fields it
// routes and orders by (event id, type name, sequence id, schedule event id,
// visible-at) passed beside them.
//
// Directory (see also durofs's docs/format.md):
//
//	instances/<key>/                        <key> = names.Encode(instance id): one directory per instance id
//	  lock, lease.json                      the instance flock and lease; a workflow task IS the lease
//	                                        (token, fence, expiry; data.batch = the pending-event files it
//	                                        fetched). After a task completes, a released lease that keeps
//	                                        owner + expiry is the sticky preference for that worker.
//	  instance.json                         durofs's instance file (name, status, current execution,
//	                                        counters: durofs ls/show read it) plus "gw": the next execution
//	                                        number and the latest execution (the only one that can be
//	                                        active) {id, n, queue, name, state, failed, parent {instance,
//	                                        execution, event}, metadata, created_ns, completed_ns, last_seq,
//	                                        events, history_bytes (the history file's size: a task's commit
//	                                        appends there without reading the file)}; format 7 listed every
//	                                        execution here (read as it is; the next commit moves them out)
//	  executions/<n>/history.jsonl          the execution's history (n = 1, 2, ... per instance id, in
//	                                        creation order). One record per executed event:
//	                                        "<crc> <sequence id> <fence> <payload>", payload =
//	                                        {"event_id":<seq>,"instance_id":…,"execution_id":<n>,
//	                                        "timestamp_ms":…,"duroxide_version":"","type":"workflow.<EventType>",
//	                                        "event":<the go-workflows history.Event JSON>}
//	  executions/<n>/state.json             durofs's execution file (status, times, event count) and
//	                                        "gw", the execution's record as above: the only copy once
//	                                        instance.json no longer lists it
//	  executions/by-id/<id>                 {"id", "n"} (<id> = names.Encode(execution id)): the number of
//	                                        each execution instance.json does not list
//	                                        (the directory goes with the instance's last execution:
//	                                        RemoveWorkflowInstances reclaims it, lock and lease included)
//	children/<parent key>/<key>             the instance's current execution is a sub-workflow of the
//	                                        parent instance (durofs's parent -> children index)
//	queues/gw-workflow-<q>/<name>.json      pending events of executions whose queue is q (<q> =
//	                                        names.Encode(q)); attrs: ikey, instance, exec (execution id),
//	                                        eid (event id), type, seid, timer; visible_at_ms = the event's
//	                                        VisibleAt for future events, else its enqueue time
//	queues/gw-activity-<q>/<name>.json      activity tasks of queue q; payload {instance, ActivityScheduled
//	                                        event}; attrs: ikey, instance, exec, wq (the workflow queue the
//	                                        result goes to), eid; claims/<name>.json is a task's lock
//	queues/gw-*-~<sha256>/gw-queue.json     {"queue": q}: a queue whose name encodes to more than 180
//	                                        bytes is named by its hash ("~" + SHA-256 of q, names.Encode);
//	                                        its name is kept here, written durably before its first message
//
// Mapping of ids: instance id -> instances/<names.Encode(id)>; execution id
// -> the execution's record (in instance.json for the latest execution,
// else in executions/<n>/state.json, n found in executions/by-id/<id>),
// whose n names executions/<n>;
// event -> one history record whose record id is its sequence id (0 for the
// pending events a bare backend test completes as they are) and whose
// payload carries the whole event; durofs history prints them as
// "workflow.<EventType>" events. Statuses: active -> "Running", continued
// as new -> "ContinuedAsNew", finished -> "Completed" (or "Failed" when the
// finishing event carries an error).
//
// # Methods and commits
//
// Every method that changes several files is ONE log record (package
// provider, fs_wal.go: under the flocks, mark the commit pending in each
// lease or claim it changes, append the record, group fdatasync = the
// commit point, then apply unsynced; whoever next takes a marked flock, the
// checkpoint, the sweep or - after a power loss - the replay finishes it
// from the record alone). Record kinds "gw" (a list of parts, one per
// instance whose files change, each marked in that instance's lease and
// applied under its flock) and "gw_act" (marked in an activity task's
// claim).
//
//   - CreateWorkflowInstance -> provider.CreateWorkflow: under the instance
//     flock, ErrInstanceAlreadyExists if the instance id has an active
//     execution (or an execution with this execution id, or is an
//     orchestration instance; an older execution's id is looked up in
//     executions/by-id/); else one "gw" record: instance.json with the new
//     execution (state, queue, parent, metadata from creation on), the
//     previous latest execution moved out (its state.json with its record,
//     its by-id entry), executions/<n>/state.json, and the
//     WorkflowExecutionStarted event published as its first pending event.
//   - SignalWorkflow -> provider.SendWorkflowEvent(instance, "", event): the
//     active execution, under the flock, else ErrInstanceNotFound (also for
//     an instance that never existed - its directory is not even created);
//     one record publishing the pending event.
//   - CancelWorkflowInstance -> SendWorkflowEvent(instance, execution, event):
//     ErrInstanceNotFound for an unknown execution; to a finished one nothing
//     is delivered (nothing would consume it).
//   - GetWorkflowTask -> provider.FetchWorkflowTask: lists the visible
//     pending events of the given queues (fsqueue's visibility index, so
//     timers not yet due cost nothing), oldest first; for each instance,
//     under its flock (try-lock; finishing a pending commit first): skip it
//     if its lease is held, or sticky to another worker until its sticky
//     expiry; delete pending events of executions that are gone or no longer
//     active; batch = the visible pending events of the active execution,
//     in the order they became visible (a timer's due time, any other
//     event's enqueue time; ties by name), as SQLite and redis deliver them:
//     a timer comes after an event that arrived before it was due;
//     write the lease (new token, fence = max(lease, instance.json) + 1,
//     expiry = WorkflowLockTimeout, data.batch). The task carries the
//     execution (instance with its parent, queue, metadata, state,
//     LastSequenceID from instance.json - no history is read) and the
//     events. It long-polls up to PollTimeout: a new event wakes it at once
//     (this process's commits, and on Linux other processes' through the
//     queue directory's watch); it looks again every poll interval (10 ms)
//     while events it could not take are visible and for a second after
//     the last one went, then less and less often (down to four times a
//     second) while none is.
//   - ExtendWorkflowTask -> the lease's expiry, if its token still holds it.
//   - CompleteWorkflowTask -> provider.CompleteWorkflowTask, one "gw" record:
//     takes the flocks of the task's instance, of every instance it creates
//     (sub-workflows) and of every existing instance it sends events to, in
//     sorted key order (so two completions cannot deadlock), finishing their
//     pending commits; checks the task's token still holds the lease (else
//     error, nothing written); then the record: the executed events appended
//     to the history at the count recorded in instance.json (AppendAt, or
//     RewriteAt in a replay), the execution's new state, last sequence id,
//     event count and completion time; the task's pending events whose ids
//     were executed deleted (all of the execution's pending events, timers
//     included, when it is no longer active; the future event of every
//     TimerCanceled); activity tasks published to their activity queues
//     (queue "" = the execution's); timers published as future events of
//     the execution; events to other executions published to their queues
//     (dropped if the execution is gone or not active, as nothing would
//     consume them); a WorkflowExecutionStarted creates the execution - a
//     part of the record for that instance, marked in its lease - unless the
//     instance id has an active execution, in which case SubWorkflowFailed
//     (ErrInstanceAlreadyExists) is delivered to the completing execution
//     instead (continue-as-new is the same, on the task's own instance: the
//     execution it ends is moved out of instance.json in the same record,
//     so the commit's size does not grow with the executions run);
//     with RemoveContinuedAsNewInstances a continued-as-new execution is
//     removed in the same record; and the lease released, sticky to this
//     worker for StickyTimeout. The task's own part is applied last, after
//     the parts creating executions its messages may name.
//   - GetActivityTask -> provider.FetchWorkflowActivity: an fsqueue claim
//     (peek-lock, ActivityLockTimeout) on the oldest task of the first given
//     queue that has one. ExtendActivityTask renews the claim.
//   - CompleteActivityTask -> provider.CompleteWorkflowActivity, one
//     "gw_act" record: under the task's lock, the claim marked,
//     the result published as a pending event of the execution (to the
//     queue recorded with the task) and the task and its claim deleted.
//   - RemoveWorkflowInstance -> provider.RemoveWorkflow: ErrInstanceNotFound,
//     ErrInstanceNotFinished, else one record removing the execution's
//     directory, its entry (instance.json itself with the last one) and its
//     leftover pending events.
//   - RemoveWorkflowInstances -> provider.RemoveWorkflows: every execution
//     finished before the time, BatchSize executions per record (the
//     instances of a batch locked in sorted order). This is what the
//     auto-expiration workflow (Feature_Expiration) calls.
//   - GetWorkflowInstanceState, GetWorkflowInstanceHistory, the diag
//     methods, GetStats and GetFutureEvents read instance.json files (an
//     older execution: its by-id entry and state.json; listings: every
//     state.json),
//     history files and queue indexes without locks: every file is replaced
//     atomically or appended, so a reader sees a committed state (a commit
//     whose writer died before applying it becomes visible when it is
//     finished: at the next flock holder, or the sweep within seconds).
//
// # New durofs engine operations, and why each is atomic
//
// Each is one write-ahead log record, so it happened entirely or not at all:
// before the record's fdatasync nothing is visible to anyone (staged files
// are hidden, marks name no record and are cleared); after it, every part is
// finished from the record alone, idempotently, by whoever next takes the
// part's flock (or claim lock), by the checkpoint (which visits every record
// since the last one and will not advance past an unfinished one), or by the
// replay after a power loss or sync failure (every byte rewritten, records
// in log order).
//
//   - CreateWorkflow(ref, start, event): create-if-absent. The check and the
//     record are under the instance flock, and every other writer of
//     instance.json takes it too, so two creators cannot both pass.
//   - SendWorkflowEvent(instance, execution, event): the active-execution
//     check and the publication are under the instance flock, and a
//     completion that ends the execution deletes its pending events under
//     the same flock, so an event is either consumed, or removed with its
//     execution, never stranded on an active one.
//   - FetchWorkflowTask / ExtendWorkflowTask: lease writes under the flock
//     (no record needed: a lease is volatile, the fence is derived from the
//     durable instance.json).
//   - CompleteWorkflowTask(task, result): one record with a part per
//     instance whose files change (the task's, and each created one), all
//     flocks held in sorted order from validation through apply. A part's
//     mark is the last thing its apply clears, so a part is finished or its
//     lease still says so. Messages are published by the part of the
//     instance they create, or by the task's own part; a staged file's
//     source is the part that publishes it, so the staged-file sweep
//     decides under the right flock.
//   - FetchWorkflowActivity / ExtendWorkflowActivity: fsqueue claims.
//   - CompleteWorkflowActivity(token, result): the claim holds the mark;
//     deleting the task and publishing the result are one record.
//   - RemoveWorkflow(ref) and RemoveWorkflows(before, batch): one record per
//     call or batch, the parts of a batch under their flocks.
//   - WorkflowExecutionInfo, WorkflowHistory, WorkflowExecutions,
//     WorkflowStats, FutureWorkflowEvents, PrepareWorkflowQueues: reads (and
//     queue directory creation).
//
// Messages to an execution are only ever published with or after that
// execution's record (creation parts publish the start event after writing
// instance.json; a task's own part, which may signal a sub-workflow it
// creates, is applied after the creating part), so a fetch may delete, as
// stale, any pending event whose execution is not the active one.
//
// # Differences from go-workflows' SQL backends
//
//   - A workflow task is locked by a lease token, not by worker name: a
//     second CompleteWorkflowTask with the same task fails, and an expired
//     lock nobody took over can still be completed or extended.
//   - Pending events for executions that are finished or gone are dropped
//     (the SQL backends keep them, unconsumed, forever).
//   - GetWorkflowInstanceHistory of an unknown execution is empty, as in
//     the SQLite backend.
//   - Listings, stats and removal by age scan instances/ (one instance.json
//     per instance id): O(instances), like durofs's admin listings.
//   - A worker that dies keeps the instances it completed last sticky to
//     its name for StickyTimeout (restarted under the same name, it takes
//     them at once), as with the SQL backends.
//
// # Operating a directory
//
// The durofs command reads and repairs a directory of go-workflows
// instances like one of orchestrations: durofs ls (workflow names and
// statuses), show (the go-workflows executions with their ids, queues and
// states; pending events and activity tasks), history (one decoded
// go-workflows event a line), queues (the gw-workflow-* and gw-activity-*
// queues' depths, timers and claims), fsck (the gw queues' messages, staged
// files, claims and pending activity completions, under the locks their
// writers take; --repair fixes what is safe and never drops an instance's
// record of its executions). durofs delete (Admin DeleteInstance) of a
// go-workflows instance removes its executions, its pending events and its
// activity tasks - claimed ones too, whose holders then fail to complete
// them - in one log record (goworkflows/cli_test.go,
// provider/fs_gw_delete_test.go).
//
// The crash-point sweep (make crashpoints) runs a script of these engine
// operations (internal/crashcheck/script/gw.go) and kills a process at
// every gw.*, gwact.* and gwredo.* failpoint in both durability modes,
// recovering each crash alone with a replay and beside a live process.
//
// # Known gaps
//
//   - The duroxide Admin API's queue depths (GetQueueDepths) count the
//     orchestrator and worker queues only; durofs queues and
//     Backend.GetStats count the gw queues.
//   - durofs prune skips go-workflows instances (RemoveWorkflowInstances
//     removes their finished executions).
//   - Creating an instance costs about ten file-system operations (its
//     directory, lock, lease, instance.json, execution directory and state,
//     the staged and published start event).
//   - Not of durofs but of go-workflows v1.2.0's worker, on any backend: its
//     workflow executor cache (worker.Options.WorkflowExecutorCacheSize,
//     default 128) closes the executor it evicts to make room even while a
//     task of that workflow runs on it, and that task then never finishes
//     (seen with 600 workflows in flight in one worker). Keep the cache
//     larger than the number of workflows a worker runs at once.
//   - Also of go-workflows v1.2.0, in its own suite:
//     AutoExpiration/StartsWorkflowAndRemoves expires finished instances
//     after 1 ms and then polls for its workflow's result; when the
//     expiration loop removes the instance before the poll sees it finished,
//     the test fails with "workflow instance not found", or, if it removes
//     it between that poll and the client's read of the history, with
//     "workflow finished, but could not find result event" (a few per cent
//     of runs on a loaded machine: durofs fires the loop's timers within
//     ~10 ms). make test reruns that failure once, by its signature only
//     (scripts/gwtest).
package goworkflows
