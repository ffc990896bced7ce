package provider

// Version is durofs's version (semantic versioning): the library's, the
// one `durofs version` prints and FSProvider.Version returns. The module is
// tagged v<Version> (README, "Versions"). Before 1.0.0 a minor version may
// change the API; the on-disk format has its own number, FormatVersion.
const Version = "0.2.0"

// DuroxideVersion is the version of duroxide (github.com/microsoft/duroxide,
// the Rust crate) whose Provider contract this package ports: its types,
// JSON shapes and semantics, and the validation catalog the conformance
// suite follows. (Event.DuroxideVersion is another thing: the version of
// the runtime that wrote an event.)
const DuroxideVersion = "0.1.26"
