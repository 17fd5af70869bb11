// Package netpolicy is the address policy: the ranges never dialled, egress allowlists of host
// names (Compile, AllowName) and a Guard that resolves, checks and dials exactly a checked
// address. A leaf over the standard library, importable by any package.
package netpolicy
