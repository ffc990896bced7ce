package provider

// SetSkipSyncDirForTest sets testSkipSyncDir (see fs_commit.go), which
// weakens one directory-sync site, and returns a function that restores it.
// Only the power-loss simulation uses it, to prove that it notices a missing
// fsync. Do not call it while a provider is in use.
func SetSkipSyncDirForTest(site string) (restore func()) {
	old := testSkipSyncDir
	testSkipSyncDir = site
	return func() { testSkipSyncDir = old }
}
