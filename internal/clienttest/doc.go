// Package clienttest is a fake coordinator for tests of package client and
// the CLI: every session, host, token and image route of apiv1 from memory,
// a scripted "shell" for exec, controllable event streams and image jobs.
package clienttest
