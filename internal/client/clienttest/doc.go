// Package clienttest is a fake coordinator for tests of the API client and
// the CLI: it serves every apiv1 route from memory, with a tiny scripted
// "shell" for exec and controllable event streams.
package clienttest
