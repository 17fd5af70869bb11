//go:build unix

package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

func notifyInterrupts(ch chan<- os.Signal) { signal.Notify(ch, os.Interrupt, syscall.SIGTERM) }

func stopNotify(ch chan<- os.Signal) { signal.Stop(ch) }

func isTerminate(sig os.Signal) bool { return sig == syscall.SIGTERM }

// watchResize sends the terminal's (rows, cols) on every SIGWINCH until
// stop is called.
func watchResize(ctx context.Context, fd int) (<-chan [2]uint16, func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	out := make(chan [2]uint16, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				w, h, err := term.GetSize(fd)
				if err != nil {
					continue
				}
				select {
				case out <- [2]uint16{uint16(h), uint16(w)}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, func() {
		signal.Stop(winch)
		cancel()
		<-done
	}
}
