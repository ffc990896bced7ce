package vfs

// NewNoFollowGeneric is NoFollow forced onto the portable check-then-use
// implementation (the one used without openat2), so Linux tests cover it.
func NewNoFollowGeneric(root string, perm Perm) FS {
	n := NoFollow(root, perm).(*noFollowFS)
	n.probed, n.useGeneric = true, true
	return n
}
