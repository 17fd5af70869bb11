// Package harnessreg is the harness registry: it builds built-in bundles and unpacks uploaded
// trees into content-addressed bundles, registers them, and pins one into a session's spec.
// Imported by the API and cmd/ wiring; the coordinator reaches it through its Harnesses interface.
package harnessreg
