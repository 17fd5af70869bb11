// Package clienttest is a fake coordinator, imported only from _test.go files
// of client and the CLI: apiv1's session, host, token and image routes from
// memory, a scripted exec "shell", controllable event streams and image jobs.
package clienttest
