package adapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/guest/durable"
	"github.com/engrams/engrams/internal/guestapi"
)

// eventsFile, inside Config.StateDir, is the durable harness event log: one
// guestapi.HarnessEvent per line, seqs gap-free from 1, fsynced per batch.
const eventsFile = "harness.events.jsonl"

// eventMarkEvery: the log remembers the byte offset of every this-many-th
// event, so a reader far into the log need not scan it from the start.
const eventMarkEvery = 1024

// eventPoll is how often a follower looks at the file even without an
// in-process append (another process may write it).
const eventPoll = time.Second

// pendingEvent is an event before it has a seq.
type pendingEvent struct {
	Type string
	Turn string
	Data any
}

// eventLog is the append-only harness event log. Appends come from one
// goroutine at a time (the adapter); readers re-read the file, so memory
// stays bounded whatever the log's length.
type eventLog struct {
	path string
	now  func() time.Time

	mu       sync.Mutex
	loaded   bool
	last     int64  // seq of the last event
	lastType string // type and turn of the last event (crash recovery)
	lastTurn string
	size     int64         // bytes of complete lines
	marks    []int64       // marks[i]: offset of event seq i*eventMarkEvery+1
	changed  chan struct{} // closed and replaced at each append
	f        *os.File      // append handle, opened on first append
}

func newEventLog(dir string) *eventLog {
	return &eventLog{path: filepath.Join(dir, eventsFile), now: time.Now, changed: make(chan struct{})}
}

// loadLocked reads the log once: its last seq and type, its marks, and cuts
// off a torn last line (a crash in the middle of an append).
func (l *eventLog) loadLocked() error {
	if l.loaded {
		return nil
	}
	f, err := os.OpenFile(l.path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		l.last, l.size, l.marks, l.loaded = 0, 0, nil, true
		return nil
	}
	if err != nil {
		return fmt.Errorf("read harness events: %w", err)
	}
	defer f.Close()
	var last, off int64
	var marks []int64
	var lastType, lastTurn string
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				if terr := f.Truncate(off); terr != nil {
					return fmt.Errorf("repair harness events: %w", terr)
				}
			}
			break
		}
		if err != nil {
			return fmt.Errorf("read harness events: %w", err)
		}
		var e guestapi.HarnessEvent
		if err := json.Unmarshal(line, &e); err != nil || e.Seq != last+1 {
			return fmt.Errorf("read harness events at byte %d: bad line (seq %d after %d): %v", off, e.Seq, last, err)
		}
		if (e.Seq-1)%eventMarkEvery == 0 {
			marks = append(marks, off)
		}
		last, lastType, lastTurn = e.Seq, e.Type, e.Turn
		off += int64(len(line))
	}
	l.last, l.lastType, l.lastTurn, l.size, l.marks, l.loaded = last, lastType, lastTurn, off, marks, true
	return nil
}

// head returns the last seq and a channel closed at the next append.
func (l *eventLog) head() (int64, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return 0, nil, err
	}
	return l.last, l.changed, nil
}

// lastEvent returns the type and turn of the last event ("" when empty).
func (l *eventLog) lastEvent() (typ, turn string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return "", "", err
	}
	return l.lastType, l.lastTurn, nil
}

// append gives evs the next seqs, writes them with one write and fsyncs.
func (l *eventLog) append(evs ...pendingEvent) error {
	if len(evs) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return err
	}
	var buf bytes.Buffer
	var offs []int64
	seq, at := l.last, l.now().UTC()
	for _, pe := range evs {
		data, err := json.Marshal(pe.Data)
		if err != nil {
			return fmt.Errorf("encode harness event %s: %w", pe.Type, err)
		}
		seq++
		line, err := json.Marshal(guestapi.HarnessEvent{Seq: seq, Type: pe.Type, Turn: pe.Turn, At: at, Data: data})
		if err != nil {
			return fmt.Errorf("encode harness event %s: %w", pe.Type, err)
		}
		offs = append(offs, l.size+int64(buf.Len()))
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if err := l.writeLocked(buf.Bytes()); err != nil {
		l.loaded = false // reload (and repair) before the next append
		if l.f != nil {
			_ = l.f.Close()
			l.f = nil
		}
		return err
	}
	for i := range evs {
		if s := l.last + int64(i) + 1; (s-1)%eventMarkEvery == 0 {
			l.marks = append(l.marks, offs[i])
		}
	}
	last := evs[len(evs)-1]
	l.last, l.lastType, l.lastTurn = seq, last.Type, last.Turn
	l.size += int64(buf.Len())
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

func (l *eventLog) writeLocked(b []byte) error {
	if l.f == nil {
		_, statErr := os.Stat(l.path)
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("append harness events: %w", err)
		}
		if statErr != nil {
			if err := durable.SyncDir(filepath.Dir(l.path)); err != nil {
				_ = f.Close()
				return fmt.Errorf("append harness events: %w", err)
			}
		}
		l.f = f
	}
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("append harness events: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("append harness events: %w", err)
	}
	return nil
}

// close releases the append handle.
func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}

// startOffset is where a reader of events after seq may start.
func (l *eventLog) startOffset(after int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := after / eventMarkEvery // the mark of seq i*eventMarkEvery+1 <= after+1
	if i >= int64(len(l.marks)) {
		i = int64(len(l.marks)) - 1
	}
	if i < 0 {
		return 0
	}
	return l.marks[i]
}

// follow calls fn with each line of an event whose seq is above after, in
// order, then with each new one as it is appended, until ctx is done or fn
// fails.
func (l *eventLog) follow(ctx context.Context, after int64, fn func(line []byte) error) error {
	tick := time.NewTicker(eventPoll)
	defer tick.Stop()
	var f *os.File
	defer func() {
		if f != nil {
			_ = f.Close()
		}
	}()
	var r *bufio.Reader
	var partial []byte
	for {
		_, changed, err := l.head()
		if err != nil {
			return err
		}
		if f == nil {
			if f, r, err = l.openAt(after); err != nil {
				return err
			}
		}
		for r != nil {
			b, err := r.ReadBytes('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read harness events: %w", err)
			}
			if err != nil { // EOF: keep a line being written for the next round
				partial = append(partial, b...)
				break
			}
			line := b
			if len(partial) > 0 {
				line, partial = append(partial, b...), nil
			}
			var h struct {
				Seq int64 `json:"seq"`
			}
			if json.Unmarshal(line, &h) != nil || h.Seq <= after {
				continue
			}
			if err := fn(line); err != nil {
				return err
			}
			after = h.Seq
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// openAt opens the log positioned at a mark at or before the event after
// seq; nil, nil when the log does not exist yet.
func (l *eventLog) openAt(after int64) (*os.File, *bufio.Reader, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read harness events: %w", err)
	}
	if off := l.startOffset(after); off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("read harness events: %w", err)
		}
	}
	return f, bufio.NewReaderSize(f, 64<<10), nil
}
