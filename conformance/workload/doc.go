// Package workload is a small, deterministic stand-in for duroxide's runtime
// that drives any provider.Provider the way the real runtime does, plus a
// catalogue of scripted orchestrations whose results are known in advance
// and a verifier that checks a provider's final state against them.
//
// It is what the crash suite and the `durofs demo` command run: a driver
// enqueues a Mix of Specs (Start, then Await, which also raises the external
// events), one or more Runtimes (possibly in several processes sharing one
// provider directory) execute them, and Verify proves that every instance
// reached its expected status and output and that every execution's history
// is well formed.
//
// # The runtime
//
// A Runtime runs orchestration dispatchers and activity workers:
//
//   - a dispatcher fetches an orchestration item, replays the orchestration
//     over the execution's history plus the new messages, and acks the turn:
//     the history delta (event ids contiguous after the existing history),
//     ActivityExecute items, TimerFired items (visible at their fire time),
//     sub-orchestration starts, SubOrchCompleted/SubOrchFailed to the parent,
//     ContinueAsNew, the execution metadata and cancelled activities;
//   - a worker fetches an ActivityExecute, runs the activity (a pure function
//     of its input), renews the lock while it runs, and acks the completion.
//
// The scripted orchestrations are ordinary Go functions written in replay
// style: they are re-run from the beginning on every turn against the
// history, their scheduling calls are matched in order against the
// scheduling events already recorded (a mismatch fails the execution as
// nondeterministic), and they return as soon as they need a result that is
// not in the history yet.
//
// # Determinism
//
// Mix is a pure function of its seed; every orchestration's result is a pure
// function of its input. Activity executions are at least once: a worker
// killed after running an activity but before acking it causes a second
// execution, which Stats counts as a duplicate but which never changes the
// history (a work item's completion is acked atomically with its deletion).
package workload
