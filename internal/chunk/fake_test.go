package chunk

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/engrams/engrams/internal/blob"
)

// memBlob is an in-memory blob.Store for tests, with counters and knobs.
type memBlob struct {
	mu     sync.Mutex
	objs   map[string]memObj
	now    func() time.Time
	puts   atomic.Int64
	stats  atomic.Int64
	gets   atomic.Int64
	putErr error // returned by every Put when set
}

type memObj struct {
	data []byte
	mod  time.Time
}

func newMemBlob() *memBlob {
	return &memBlob{objs: make(map[string]memObj), now: time.Now}
}

func (m *memBlob) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	m.puts.Add(1)
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if size >= 0 && int64(len(b)) != size {
		return fmt.Errorf("put %s: got %d bytes, want %d", key, len(b), size)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.putErr != nil {
		return m.putErr
	}
	m.objs[key] = memObj{data: b, mod: m.now()}
	return nil
}

func (m *memBlob) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	m.gets.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, blob.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(bytes.Clone(o.data))), nil
}

func (m *memBlob) Stat(ctx context.Context, key string) (blob.Info, error) {
	m.stats.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, blob.ErrNotFound)
	}
	return blob.Info{Key: key, Size: int64(len(o.data)), ModTime: o.mod}, nil
}

func (m *memBlob) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *memBlob) List(ctx context.Context, prefix string, fn func(blob.Info) error) error {
	m.mu.Lock()
	var infos []blob.Info
	for k, o := range m.objs {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, blob.Info{Key: k, Size: int64(len(o.data)), ModTime: o.mod})
		}
	}
	m.mu.Unlock()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	for _, in := range infos {
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}

// keys lists the stored keys.
func (m *memBlob) keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ks []string
	for k := range m.objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// mutate changes the stored bytes of key in place.
func (m *memBlob) mutate(key string, f func([]byte) []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objs[key]
	o.data = f(bytes.Clone(o.data))
	m.objs[key] = o
}

// setModTime backdates or postdates an object.
func (m *memBlob) setModTime(key string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objs[key]
	o.mod = t
	m.objs[key] = o
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
