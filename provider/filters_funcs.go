package provider

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidTagFilter is wrapped by the errors of Tags and DefaultAndTags.
var ErrInvalidTagFilter = errors.New("invalid tag filter")

// ErrInvalidSemVer is wrapped by the errors of ParseSemVer.
var ErrInvalidSemVer = errors.New("invalid semver")

// DefaultOnlyTags returns the filter that selects untagged items only (the
// default, and TagFilter's zero value).
func DefaultOnlyTags() TagFilter { return TagFilter{Mode: TagDefaultOnly} }

// AnyTag returns the filter that selects every item, tagged or not.
func AnyTag() TagFilter { return TagFilter{Mode: TagAny} }

// NoTags returns the filter that selects nothing (orchestrator-only mode).
func NoTags() TagFilter { return TagFilter{Mode: TagNone} }

// Tags returns the filter that selects items whose tag is one of tags.
// Duplicates are removed; it fails, wrapping ErrInvalidTagFilter, when no
// tag is given, when more than MaxWorkerTags distinct tags are given, or
// when a tag is longer than MaxTagNameBytes.
func Tags(tags ...string) (TagFilter, error) {
	set, err := tagSet(tags)
	if err != nil {
		return TagFilter{}, fmt.Errorf("provider: Tags: %w", err)
	}
	return TagFilter{Mode: TagsOnly, Set: set}, nil
}

// DefaultAndTags returns the filter that selects untagged items and items
// whose tag is one of tags. It validates tags like Tags.
func DefaultAndTags(tags ...string) (TagFilter, error) {
	set, err := tagSet(tags)
	if err != nil {
		return TagFilter{}, fmt.Errorf("provider: DefaultAndTags: %w", err)
	}
	return TagFilter{Mode: TagDefaultAnd, Set: set}, nil
}

// MustTags is Tags that panics on error. It is meant for tests and examples
// with constant arguments only.
func MustTags(tags ...string) TagFilter {
	f, err := Tags(tags...)
	if err != nil {
		panic(err)
	}
	return f
}

// MustDefaultAndTags is DefaultAndTags that panics on error. It is meant for
// tests and examples with constant arguments only.
func MustDefaultAndTags(tags ...string) TagFilter {
	f, err := DefaultAndTags(tags...)
	if err != nil {
		panic(err)
	}
	return f
}

// tagSet validates tags and returns them deduplicated and sorted.
func tagSet(tags []string) ([]string, error) {
	if len(tags) == 0 {
		return nil, fmt.Errorf("%w: at least one tag is required", ErrInvalidTagFilter)
	}
	for _, t := range tags {
		if len(t) > MaxTagNameBytes {
			return nil, fmt.Errorf("%w: tag of %d bytes exceeds the limit of %d", ErrInvalidTagFilter, len(t), MaxTagNameBytes)
		}
	}
	set := slices.Clone(tags)
	slices.Sort(set)
	set = slices.Compact(set)
	if len(set) > MaxWorkerTags {
		return nil, fmt.Errorf("%w: %d distinct tags exceed the limit of %d", ErrInvalidTagFilter, len(set), MaxWorkerTags)
	}
	return set, nil
}

// Matches reports whether the filter selects an item with the given tag (nil
// for an untagged item): DefaultOnly selects untagged items, TagsOnly items
// whose tag is in Set, DefaultAnd both, Any everything and None nothing.
func (f TagFilter) Matches(tag *string) bool {
	switch f.Mode {
	case TagDefaultOnly:
		return tag == nil
	case TagsOnly:
		return tag != nil && slices.Contains(f.Set, *tag)
	case TagDefaultAnd:
		return tag == nil || slices.Contains(f.Set, *tag)
	case TagAny:
		return true
	}
	return false
}

// ParseSemVer parses a strict "major.minor.patch" version: three decimal
// numbers without signs, leading zeros, whitespace, pre-release or build
// suffixes. Errors wrap ErrInvalidSemVer.
func ParseSemVer(s string) (SemVer, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return SemVer{}, fmt.Errorf("%w %q: want major.minor.patch", ErrInvalidSemVer, s)
	}
	var n [3]uint64
	for i, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
			return SemVer{}, fmt.Errorf("%w %q: component %q is not a decimal number", ErrInvalidSemVer, s, p)
		}
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return SemVer{}, fmt.Errorf("%w %q: %w", ErrInvalidSemVer, s, err)
		}
		n[i] = v
	}
	return SemVer{Major: n[0], Minor: n[1], Patch: n[2]}, nil
}

// String returns "major.minor.patch".
func (v SemVer) String() string {
	return strconv.FormatUint(v.Major, 10) + "." + strconv.FormatUint(v.Minor, 10) + "." + strconv.FormatUint(v.Patch, 10)
}

// Compare returns -1, 0 or +1 as v is less than, equal to or greater than o.
func (v SemVer) Compare(o SemVer) int {
	if c := cmpUint(v.Major, o.Major); c != 0 {
		return c
	}
	if c := cmpUint(v.Minor, o.Minor); c != 0 {
		return c
	}
	return cmpUint(v.Patch, o.Patch)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// NewSemverRange returns the inclusive range [minVersion, maxVersion].
func NewSemverRange(minVersion, maxVersion SemVer) SemverRange {
	return SemverRange{Min: minVersion, Max: maxVersion}
}

// Contains reports whether Min <= v <= Max.
func (r SemverRange) Contains(v SemVer) bool {
	return r.Min.Compare(v) <= 0 && v.Compare(r.Max) <= 0
}

// IsCompatible reports whether the dispatcher can replay an execution pinned
// to v. Only the first range is consulted (duroxide's phase-1 contract); an
// empty list is compatible with nothing. A nil filter means "no filtering"
// and is compatible with every version.
func (f *DispatcherCapabilityFilter) IsCompatible(v SemVer) bool {
	if f == nil {
		return true
	}
	if len(f.SupportedDuroxideVersions) == 0 {
		return false
	}
	return f.SupportedDuroxideVersions[0].Contains(v)
}
