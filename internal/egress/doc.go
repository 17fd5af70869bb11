// Package egress is a machine's host-side egress data plane: the filtering DNS resolver, the
// transparent and explicit HTTP(S) proxy that checks every name before dialling it, and their
// events. Imported by the host agent (internal/host/...) and cmd/ only.
package egress
