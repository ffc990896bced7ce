package conformance

// contractTests are categories K cancellation, O capability_filtering,
// P sessions, Q custom_status and R tag_filtering (catalog numbers 72–87,
// 109–178).
var contractTests = []testCase{}
