module github.com/durofs/durofs

go 1.26.0

require (
	github.com/gofrs/flock v0.13.1
	github.com/google/uuid v1.6.0
	github.com/natefinch/atomic v1.0.1
	github.com/oklog/ulid/v2 v2.1.2
)

require golang.org/x/sys v0.49.0 // indirect
