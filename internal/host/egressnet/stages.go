package egressnet

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/engrams/engrams/internal/egress"
)

// stages runs a path's servers (resolver, proxy), its event queue and its
// sink, and stops them in that order, so the events of a server's last
// connections reach the queue, and the queue's last ones the sink.
type stages struct {
	servers, queue, sink             sync.WaitGroup
	stopServers, stopQueue, stopSink context.CancelFunc
	once                             sync.Once
}

func startStages(log *slog.Logger, servers []func(context.Context) error, events *egress.Events, sink Sink) *stages {
	s := &stages{}
	sinkCtx, stopSink := context.WithCancel(context.Background())
	queueCtx, stopQueue := context.WithCancel(context.Background())
	serversCtx, stopServers := context.WithCancel(context.Background())
	s.stopServers, s.stopQueue, s.stopSink = stopServers, stopQueue, stopSink
	s.sink.Go(func() { _ = sink.Run(sinkCtx) })
	s.queue.Go(func() { _ = events.Run(queueCtx) })
	for _, run := range servers {
		s.servers.Go(func() {
			if err := run(serversCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("egress path part ended", "err", err)
			}
		})
	}
	return s
}

// stop ends the servers (closeListeners unblocks them), then the queue,
// then the sink, joining each; it returns closeListeners' error.
func (s *stages) stop(closeListeners func() error) error {
	var err error
	s.once.Do(func() {
		s.stopServers()
		err = closeListeners()
		s.servers.Wait()
		s.stopQueue()
		s.queue.Wait()
		s.stopSink()
		s.sink.Wait()
	})
	return err
}
