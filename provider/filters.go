package provider

// TagFilter selects worker items by tag. Build one with DefaultOnlyTags,
// NoTags, AnyTag, Tags or DefaultAndTags; the zero value is DefaultOnly.
type TagFilter struct {
	Mode TagFilterMode
	// Set holds the tags for TagsOnly and DefaultAnd.
	Set []string
}

// TagFilterMode is a TagFilter's kind.
type TagFilterMode int

// The tag filter modes.
const (
	// TagDefaultOnly selects untagged items only (the default).
	TagDefaultOnly TagFilterMode = iota
	// TagsOnly selects items whose tag is in the set.
	TagsOnly
	// TagDefaultAnd selects untagged items and items whose tag is in the set.
	TagDefaultAnd
	// TagAny selects every item.
	TagAny
	// TagNone selects nothing.
	TagNone
)

// SemVer is a major.minor.patch version.
type SemVer struct {
	Major, Minor, Patch uint64
}

// SemverRange is an inclusive version range.
type SemverRange struct {
	Min, Max SemVer
}

// DispatcherCapabilityFilter lists the versions a dispatcher can replay.
// Only the first range is used (duroxide's phase-1 contract); an empty list
// matches nothing.
type DispatcherCapabilityFilter struct {
	SupportedDuroxideVersions []SemverRange
}
