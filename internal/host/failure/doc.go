// Package failure is a host agent failure carrying the answer the
// coordinator gets (HTTP status, host link code, a warm-up's output tail).
// Imported by package host and its sub-packages only.
package failure
