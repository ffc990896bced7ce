//go:build !unix

package sharedsync

// platform is empty where the package is unsupported.
type platform struct{}

func (p *platform) lock() error  { return ErrUnsupported }
func (p *platform) unlock()      {}
func (p *platform) close() error { return nil }

// Open returns ErrUnsupported on this system.
func Open(path string, perm uint32, run func() error) (*Coordinator, error) {
	return nil, ErrUnsupported
}
