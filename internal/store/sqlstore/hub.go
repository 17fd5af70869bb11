package sqlstore

import (
	"context"
	"sync"
)

// Hub fans wake-ups out to in-process subscribers. Each subscriber has a
// one-slot channel, so wake-ups that arrive before it reads coalesce.
type Hub struct {
	mu     sync.Mutex
	topics map[string]map[*hubSub]struct{}
	closed bool
}

type hubSub struct {
	ch   chan struct{}
	stop func() bool
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{topics: make(map[string]map[*hubSub]struct{})} }

// Subscribe returns a channel that receives a value after each Wake of topic
// and is closed when ctx ends or the hub closes.
func (h *Hub) Subscribe(ctx context.Context, topic string) <-chan struct{} {
	sub := &hubSub{ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(sub.ch)
		return sub.ch
	}
	set := h.topics[topic]
	if set == nil {
		set = make(map[*hubSub]struct{})
		h.topics[topic] = set
	}
	set[sub] = struct{}{}
	// AfterFunc runs its function in its own goroutine, so taking h.mu
	// there cannot deadlock with this call holding it.
	sub.stop = context.AfterFunc(ctx, func() { h.remove(topic, sub) })
	return sub.ch
}

func (h *Hub) remove(topic string, sub *hubSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.topics[topic]
	if _, ok := set[sub]; !ok {
		return
	}
	delete(set, sub)
	if len(set) == 0 {
		delete(h.topics, topic)
	}
	close(sub.ch)
}

// Wake wakes every subscriber of topic without blocking.
func (h *Hub) Wake(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.topics[topic] {
		select {
		case sub.ch <- struct{}{}:
		default:
		}
	}
}

// WakeAll wakes every subscriber, e.g. after wake-ups may have been missed.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.topics {
		for sub := range set {
			select {
			case sub.ch <- struct{}{}:
			default:
			}
		}
	}
}

// Close closes every subscriber's channel; later subscriptions get a closed
// channel.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for topic, set := range h.topics {
		for sub := range set {
			sub.stop()
			close(sub.ch)
		}
		delete(h.topics, topic)
	}
}
