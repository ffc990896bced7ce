package conformance

// adminTests are categories H management, L deletion, M prune and
// N bulk_deletion (catalog numbers 51–57, 88–108). They need the provider's
// Admin capability.
var adminTests = []testCase{}
