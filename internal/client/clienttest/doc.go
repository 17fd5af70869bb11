// Package clienttest is a fake coordinator for tests of the API client and
// the CLI: it serves every apiv1 route from memory, with a tiny scripted
// "shell" for exec, controllable event streams and scripted image jobs.
package clienttest
