package guest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guest/durable"
	"github.com/engrams/engrams/internal/guestapi"
)

// Files inside Config.StateDir.
const (
	appliedFile = "outbox.applied" // decimal applied seq, fsynced, replaced atomically
	journalFile = "outbox.jsonl"   // one journalLine per applied entry, fsynced
	lockFile    = "outbox.lock"    // flock: one daemon process applies at a time
)

// maxOutboxBody bounds one POST PathOutbox body.
const maxOutboxBody = 16 << 20

// journalLine is one applied entry in the journal.
type journalLine struct {
	guestapi.OutboxEntry
	AppliedAt time.Time `json:"applied_at"`
}

// outbox applies entries exactly once per guest state. The journal is
// written before the applied seq, and loading takes the larger of the two,
// so a crash between them neither loses nor repeats an entry.
type outbox struct {
	dir    string
	notify func() // called after entries were applied; must not block (nil: none)

	mu      sync.Mutex // serializes loads and applies in this process
	loaded  bool
	applied int64
}

// state returns the applied seq, loading it from disk on first use.
func (o *outbox) state() (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.load(); err != nil {
		return 0, err
	}
	return o.applied, nil
}

// apply validates entries, then applies those whose seq follows the
// applied seq, in order, stopping at a gap. It returns the applied seq.
func (o *outbox) apply(entries []guestapi.OutboxEntry) (int64, error) {
	if err := validateEntries(entries); err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	unlock, err := o.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	before := o.applied
	applied, err := o.applyLocked(entries)
	if err != nil {
		o.loaded = false // reload (and reconcile with the journal) next time
	}
	if err == nil && applied > before && o.notify != nil {
		o.notify()
	}
	return applied, err
}

func (o *outbox) applyLocked(entries []guestapi.OutboxEntry) (int64, error) {
	// Another process may have applied entries since this one loaded.
	if cur, err := readApplied(o.dir); err != nil || cur != o.applied {
		o.loaded = false
	}
	if err := o.load(); err != nil {
		return 0, err
	}
	var next []guestapi.OutboxEntry
	want := o.applied + 1
	for _, e := range entries {
		if e.Seq < want {
			continue // applied already in this guest state
		}
		if e.Seq > want {
			break // a gap: later entries wait for the missing one
		}
		next = append(next, e)
		want++
	}
	if len(next) == 0 {
		return o.applied, nil
	}
	if err := o.appendJournal(next); err != nil {
		return 0, err
	}
	last := next[len(next)-1].Seq
	if err := writeApplied(o.dir, last); err != nil {
		return 0, err
	}
	o.applied = last
	return last, nil
}

func validateEntries(entries []guestapi.OutboxEntry) error {
	var prev int64
	for i, e := range entries {
		switch {
		case e.Seq <= 0:
			return fmt.Errorf("entry %d: seq must be positive, got %d", i, e.Seq)
		case e.Seq <= prev:
			return fmt.Errorf("entry %d: seqs must increase strictly, got %d after %d", i, e.Seq, prev)
		case e.ID == "":
			return fmt.Errorf("entry %d (seq %d): id is required", i, e.Seq)
		case e.Kind == "":
			return fmt.Errorf("entry %d (seq %d): kind is required", i, e.Seq)
		}
		prev = e.Seq
	}
	return nil
}

// lock takes the state directory's file lock (another daemon process may
// share the directory, e.g. one restarted by init while this one exits).
func (o *outbox) lock() (func(), error) {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create outbox state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(o.dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open outbox lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock outbox: %w", err)
	}
	return func() { _ = f.Close() }, nil
}

// load reads the applied seq and reconciles it with the journal. Call with
// o.mu held.
func (o *outbox) load() error {
	if o.loaded {
		return nil
	}
	applied, err := readApplied(o.dir)
	if err != nil {
		return err
	}
	last, err := repairJournal(filepath.Join(o.dir, journalFile))
	if err != nil {
		return err
	}
	if last > applied { // crashed after the journal write, before the seq write
		if err := writeApplied(o.dir, last); err != nil {
			return err
		}
		applied = last
	}
	o.applied, o.loaded = applied, true
	return nil
}

func readApplied(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, appliedFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read outbox applied seq: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("read outbox applied seq: bad content %q", b)
	}
	return n, nil
}

// writeApplied replaces the applied-seq file atomically and durably.
func writeApplied(dir string, seq int64) error {
	if err := durable.WriteFileAtomic(dir, appliedFile, []byte(strconv.FormatInt(seq, 10)+"\n")); err != nil {
		return fmt.Errorf("write outbox applied seq: %w", err)
	}
	return nil
}

// appendJournal appends one line per entry and fsyncs the journal.
func (o *outbox) appendJournal(entries []guestapi.OutboxEntry) error {
	var buf bytes.Buffer
	now := time.Now().UTC()
	for _, e := range entries {
		line, err := json.Marshal(journalLine{OutboxEntry: e, AppliedAt: now})
		if err != nil {
			return fmt.Errorf("encode outbox entry %d: %w", e.Seq, err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	p := filepath.Join(o.dir, journalFile)
	_, statErr := os.Stat(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("append outbox journal: %w", err)
	}
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && statErr != nil {
		err = durable.SyncDir(o.dir) // the journal was just created
	}
	if err != nil {
		return fmt.Errorf("append outbox journal: %w", err)
	}
	return nil
}

// repairJournal returns the seq of the journal's last complete line and
// cuts off a torn last line (a crash in the middle of an append).
func repairJournal(p string) (int64, error) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read outbox journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var last, good int64
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 { // torn: no newline
				if terr := f.Truncate(good); terr != nil {
					return 0, fmt.Errorf("repair outbox journal: %w", terr)
				}
			}
			return last, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read outbox journal: %w", err)
		}
		var jl journalLine
		if err := json.Unmarshal(line, &jl); err != nil {
			return 0, fmt.Errorf("read outbox journal at byte %d: %w", good, err)
		}
		last = jl.Seq
		good += int64(len(line))
	}
}

// JournalFrom reads the journal's complete lines from byte off and returns
// the entries above seq after, and the bytes read (the harness adapter
// reads its prompts and interrupts so).
func (o *outbox) JournalFrom(off, after int64) ([]guestapi.OutboxEntry, int64, error) {
	return readJournalFrom(filepath.Join(o.dir, journalFile), off, after)
}

// readJournalFrom reads the outbox journal's complete lines from byte off
// and returns the entries above seq after, and the bytes read.
func readJournalFrom(p string, off, after int64) ([]guestapi.OutboxEntry, int64, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read outbox journal: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("read outbox journal: %w", err)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var out []guestapi.OutboxEntry
	var n int64
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, n, nil // a line being written is read next time
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read outbox journal: %w", err)
		}
		var jl journalLine
		if err := json.Unmarshal(line, &jl); err != nil {
			return nil, 0, fmt.Errorf("read outbox journal at byte %d: %w", off+n, err)
		}
		if jl.Seq > after {
			out = append(out, jl.OutboxEntry)
		}
		n += int64(len(line))
	}
}

func (s *Server) handleOutboxGet(w http.ResponseWriter, _ *http.Request) {
	applied, err := s.outbox.state()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, guestapi.OutboxState{Applied: applied})
}

func (s *Server) handleOutboxPost(w http.ResponseWriter, r *http.Request) {
	var req guestapi.OutboxApply
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxOutboxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "decode outbox apply: "+err.Error())
		return
	}
	if err := validateEntries(req.Entries); err != nil {
		writeError(w, http.StatusBadRequest, "outbox apply: "+err.Error())
		return
	}
	applied, err := s.outbox.apply(req.Entries)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, guestapi.OutboxState{Applied: applied})
}

// handleSync flushes every filesystem to its disk (sync(2)).
func (s *Server) handleSync(w http.ResponseWriter, _ *http.Request) {
	unix.Sync()
	w.WriteHeader(http.StatusNoContent)
}
