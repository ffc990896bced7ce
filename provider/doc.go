// Package provider is the duroxide Provider contract in Go, and its filesystem
// implementation.
//
// The contract (a port of duroxide's src/providers/mod.rs) is the [Provider]
// interface, the optional [Admin] capability, and the data they exchange:
// [WorkItem] queue payloads, history [Event]s, [ExecutionMetadata],
// [OrchestrationItem] and the management types. WorkItem and Event marshal to
// exactly duroxide's serde JSON, so a durofs directory can be read by any tool
// that speaks duroxide's format, and events of types this version does not
// know are stored and returned byte for byte.
//
// Errors are [*ProviderError] values; [IsRetryable] tells a runtime whether to
// retry. Contract failures (an invalid or expired lock token, a duplicate
// event, a missing instance) are permanent.
package provider
