//go:build !unix

package cli

import (
	"context"
	"os"
	"os/signal"
)

func notifyInterrupts(ch chan<- os.Signal) { signal.Notify(ch, os.Interrupt) }

func stopNotify(ch chan<- os.Signal) { signal.Stop(ch) }

func isTerminate(os.Signal) bool { return false }

// watchResize is a no-op where there is no SIGWINCH.
func watchResize(context.Context, int) (<-chan [2]uint16, func()) { return nil, func() {} }
