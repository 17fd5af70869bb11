// Package keyed serializes work per key (a session, a shared disk, an
// image capture). Imported by package host and its sub-packages only.
package keyed
