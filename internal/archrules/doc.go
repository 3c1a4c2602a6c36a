// Package archrules holds, in its tests, the import rules of
// docs/architecture.md: which packages may import which (the rooms table of
// rules_test.go), that a sub-package never imports its parent, and that the
// backend and the engine know nothing of protos, Connect or gRPC. The tests
// read the module's import graph with `go list` and fail naming each import
// that breaks a rule; the table in rules_test.go is the source of truth that
// docs/architecture.md describes. The package has no code of its own.
package archrules
