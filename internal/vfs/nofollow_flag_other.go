//go:build !unix

package vfs

// oNoFollow is 0 where open has no O_NOFOLLOW: the final component is
// checked with Lstat before the call instead.
const oNoFollow = 0

// mapNoFollow is the identity where there is no O_NOFOLLOW.
func mapNoFollow(err error) error { return err }

// oNonBlock is 0 where open has no O_NONBLOCK.
const oNonBlock = 0

// mapNotRegular is the identity where there is no O_NONBLOCK.
func mapNotRegular(err error) error { return err }
