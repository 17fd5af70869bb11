package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestapi"
)

// Files inside Config.StateDir.
const (
	turnsFile     = "harness.turns.json" // turnState, replaced atomically
	harnessLock   = "harness.lock"       // flock: one adapter runs turns at a time
	harnessStderr = "harness.stderr.log" // harness processes' stderr
	harnessPid    = "harness.pid"        // the running harness process
)

// Adapter defaults.
const (
	defaultHarnessStall = 10 * time.Minute
	defaultHarnessGrace = 5 * time.Second
)

// Config is the adapter's configuration (the daemon's, for the harness).
type Config struct {
	// WorkDir is a turn's default working directory.
	WorkDir string
	// Env is the session's base environment ("K=V"), under the prompt's.
	Env []string
	// StateDir holds the adapter's durable state (turn state, event log,
	// harness stderr log); it must be on the guest's snapshotted disk.
	StateDir string
	// HarnessDir is where the harness bundle is mounted; without a
	// harness.json there the harness state is "none".
	HarnessDir string
	// HarnessHome is the harness processes' HOME (on the snapshotted disk).
	HarnessHome string
	// GatewayAddr is the model gateway listener's loopback TCP address.
	GatewayAddr string
	// HarnessStall: a turn whose harness prints nothing this long is
	// stopped with an error (10 minutes if zero).
	HarnessStall time.Duration
	// HarnessGrace: an interrupted harness gets SIGINT, then SIGKILL after
	// this long (5 seconds if zero).
	HarnessGrace time.Duration
}

// Gateway is the model gateway listener the harness's base URLs point at.
type Gateway interface {
	// Listen opens the listener on addr (a loopback address).
	Listen(addr string) error
	// Serve accepts connections until ctx is done.
	Serve(ctx context.Context)
	// URL is the gateway's base URL ("" before it listens); the error says
	// why it cannot listen.
	URL() (string, error)
}

// Journal is the outbox journal the prompts and interrupts come from.
type Journal interface {
	// JournalFrom reads the journal's complete lines from byte off and
	// returns the entries above seq after, and the bytes read.
	JournalFrom(off, after int64) ([]guestapi.OutboxEntry, int64, error)
}

// Deps are the adapter's collaborators.
type Deps struct {
	Logger  *slog.Logger // nil: discard
	Gateway Gateway
	Journal Journal
}

// errGatewayClosed: the gateway listener stopped (or never started).
var errGatewayClosed = errors.New("the model gateway is not running")

// errInterrupted is the cancel cause of an interrupted turn.
var errInterrupted = errors.New("turn interrupted")

// turnState is the adapter's durable progress through the outbox.
type turnState struct {
	// Handled is the outbox seq through which every prompt is done.
	Handled int64 `json:"handled"`
	// Running is the seq of the prompt started and not yet done (0: none).
	Running     int64  `json:"running,omitempty"`
	RunningTurn string `json:"running_turn,omitempty"`
	// Harness and Conversation: the harness's conversation to continue.
	Harness      string `json:"harness,omitempty"`
	Conversation string `json:"conversation,omitempty"`
}

// queuedPrompt is a prompt entry waiting for its turn.
type queuedPrompt struct {
	seq       int64
	payload   guestapi.PromptPayload
	err       error // the payload could not be decoded
	cancelled bool  // interrupted before it started
}

// activeTurn is the turn running now.
type activeTurn struct {
	turn   string
	cancel context.CancelCauseFunc
}

// runner runs turns of one harness protocol.
type runner interface {
	// turn runs t to its end, emitting its events but the final error and
	// idle, which it returns.
	turn(ctx context.Context, t *turnRun) turnOutcome
	conversation() string
	close()
}

// turnOutcome is how a turn ended.
type turnOutcome struct {
	result    string
	err       *guestapi.ErrorData // to emit before idle; nil when none (or emitted already)
	cancelled bool                // ctx ended the turn
}

// turnRun is one resolved prompt as a runner sees it.
type turnRun struct {
	name, text           string
	workdir, model, mode string
	argv                 []string // the entrypoint, absolute
	env                  []string
	desc                 guestapi.HarnessDescriptor
	gateway              string // gateway base URL ("" when not listening)
	emitFn               func(evs ...pendingEvent)
}

func (t *turnRun) emit(evs ...pendingEvent) {
	for i := range evs {
		evs[i].Turn = t.name
	}
	t.emitFn(evs...)
}

func (t *turnRun) started(conversation string) pendingEvent {
	return pendingEvent{Type: guestapi.EventRunStarted, Data: guestapi.RunStartedData{
		Harness: t.desc.Name, Version: t.desc.Version, Model: t.model, Mode: t.mode, Conversation: conversation,
	}}
}

// Adapter runs the harness: it reads prompt and interrupt entries from the
// outbox journal, runs turns one at a time in outbox order and records
// their events.
type Adapter struct {
	cfg     Config
	log     *slog.Logger
	events  *eventLog
	gw      Gateway
	journal Journal
	wake    chan struct{} // the outbox applied entries

	mu         sync.Mutex
	queue      []*queuedPrompt
	current    *activeTurn
	scanned    int64         // outbox seq read through
	journalOff int64         // bytes of the journal read
	queued     chan struct{} // the queue grew

	// Owned by the turn goroutine.
	state turnState
	rn    runner
	rnKey string
}

// New returns an Adapter; Run runs it.
func New(cfg Config, deps Deps) *Adapter {
	if cfg.HarnessStall <= 0 {
		cfg.HarnessStall = defaultHarnessStall
	}
	if cfg.HarnessGrace <= 0 {
		cfg.HarnessGrace = defaultHarnessGrace
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Adapter{
		cfg: cfg, log: log, events: newEventLog(cfg.StateDir), gw: deps.Gateway, journal: deps.Journal,
		wake: make(chan struct{}, 1), queued: make(chan struct{}, 1),
	}
}

// Notify tells the adapter the outbox applied entries; it never blocks.
func (a *Adapter) Notify() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// EventHead is the event log's last seq.
func (a *Adapter) EventHead() (int64, error) {
	head, _, err := a.events.head()
	return head, err
}

// FollowEvents calls fn with each event line (a guestapi.HarnessEvent)
// whose seq is above after, in order, then with each new one as it is
// recorded, until ctx is done or fn fails.
func (a *Adapter) FollowEvents(ctx context.Context, after int64, fn func(line []byte) error) error {
	return a.events.follow(ctx, after, fn)
}

// Run runs turns until ctx is done, and the gateway listener with them. It
// joins everything it started.
func (a *Adapter) Run(ctx context.Context) error {
	unlock, err := lockWait(ctx, filepath.Join(a.cfg.StateDir, harnessLock))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run harness adapter: %w", err)
	}
	defer unlock()
	defer a.events.close()
	if err := os.MkdirAll(a.cfg.HarnessHome, 0o700); err != nil {
		return fmt.Errorf("run harness adapter: create harness home: %w", err)
	}
	killLeftover(filepath.Join(a.cfg.StateDir, harnessPid), a.log)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before wg.Wait: ends the gateway when starting fails
	if err := a.gw.Listen(a.cfg.GatewayAddr); err != nil {
		a.log.Error("model gateway listener failed; harness turns will fail", "err", err)
	} else {
		wg.Go(func() { a.gw.Serve(ctx) })
	}
	if err := a.recover(); err != nil {
		return fmt.Errorf("run harness adapter: %w", err)
	}
	if err := a.scan(); err != nil {
		return fmt.Errorf("run harness adapter: %w", err)
	}
	wg.Go(func() { a.scanLoop(ctx) })
	a.turns(ctx)
	return nil
}

// lockWait takes an exclusive flock on p, waiting while another process
// (or another Server of this one) holds it.
func lockWait(ctx context.Context, p string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open harness lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock harness: %w", err)
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// recover loads the turn state; a turn that was running when the daemon
// died is reported interrupted (unless its idle made it to the log).
func (a *Adapter) recover() error {
	st, err := readTurnState(a.cfg.StateDir)
	if err != nil {
		return err
	}
	a.state = st
	if st.Running == 0 {
		a.scanned = st.Handled
		return nil
	}
	typ, turn, err := a.events.lastEvent()
	if err != nil {
		return err
	}
	if typ != guestapi.EventIdle || turn != st.RunningTurn {
		a.log.Warn("harness turn was running when the daemon stopped; reporting it interrupted", "turn", st.RunningTurn)
		err := a.events.append(
			pendingEvent{Type: guestapi.EventError, Turn: st.RunningTurn, Data: guestapi.ErrorData{
				Kind: guestapi.ErrorInterrupted, Message: "the guest daemon stopped during the turn"}},
			pendingEvent{Type: guestapi.EventIdle, Turn: st.RunningTurn, Data: guestapi.IdleData{}})
		if err != nil {
			return err
		}
	}
	a.state.Handled, a.state.Running, a.state.RunningTurn = st.Running, 0, ""
	a.scanned = a.state.Handled
	return writeTurnState(a.cfg.StateDir, a.state)
}

func (a *Adapter) scanLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		}
		if err := a.scan(); err != nil {
			a.log.Error("read the outbox journal for harness entries", "err", err)
		}
	}
}

// scan reads the journal's new entries: prompts join the queue,
// interrupts take effect at once.
func (a *Adapter) scan() error {
	a.mu.Lock()
	off, after := a.journalOff, a.scanned
	a.mu.Unlock()
	entries, n, err := a.journal.JournalFrom(off, after)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.journalOff = off + n
	grew := false
	for _, e := range entries {
		if e.Seq <= a.scanned {
			continue
		}
		a.scanned = e.Seq
		switch e.Kind {
		case guestapi.OutboxPrompt:
			q := &queuedPrompt{seq: e.Seq}
			if err := json.Unmarshal(e.Payload, &q.payload); err != nil {
				q.err = fmt.Errorf("decode %s payload: %w", e.Kind, err)
			}
			a.queue = append(a.queue, q)
			grew = true
		case guestapi.OutboxInterrupt:
			var p guestapi.InterruptPayload
			_ = json.Unmarshal(e.Payload, &p) // a bad payload interrupts whatever runs
			a.interruptLocked(p.Turn)
		}
	}
	if grew {
		select {
		case a.queued <- struct{}{}:
		default:
		}
	}
	return nil
}

// interruptLocked ends the running turn if it is turn ("" = any) and marks
// queued prompts of that turn cancelled.
func (a *Adapter) interruptLocked(turn string) {
	if a.current != nil && (turn == "" || turn == a.current.turn) {
		a.current.cancel(errInterrupted)
	}
	if turn == "" {
		return
	}
	for _, q := range a.queue {
		if q.payload.Turn == turn {
			q.cancelled = true
		}
	}
}

// turns runs queued prompts one at a time until ctx is done.
func (a *Adapter) turns(ctx context.Context) {
	defer func() {
		if a.rn != nil {
			a.rn.close()
		}
	}()
	for {
		q, tctx, ok := a.next(ctx)
		if !ok {
			return
		}
		a.runOne(ctx, tctx, q)
		a.mu.Lock()
		a.current = nil
		a.mu.Unlock()
	}
}

// next waits for the next prompt and makes it the current turn.
func (a *Adapter) next(ctx context.Context) (*queuedPrompt, context.Context, bool) {
	for {
		a.mu.Lock()
		if len(a.queue) > 0 {
			q := a.queue[0]
			a.queue = a.queue[1:]
			tctx, cancel := context.WithCancelCause(ctx)
			a.current = &activeTurn{turn: q.payload.Turn, cancel: cancel}
			if q.cancelled {
				cancel(errInterrupted)
			}
			a.mu.Unlock()
			return q, tctx, true
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, false
		case <-a.queued:
		}
	}
}

// runOne runs one prompt and records how it ended. A turn the daemon's
// stop cut short is left "running" in the state: the next start reports it.
func (a *Adapter) runOne(ctx, tctx context.Context, q *queuedPrompt) {
	defer func() {
		if cancel := a.currentCancel(); cancel != nil {
			cancel(nil)
		}
	}()
	start := time.Now()
	emit := func(evs ...pendingEvent) {
		if err := a.events.append(evs...); err != nil {
			a.log.Error("record harness events", "turn", q.payload.Turn, "err", err)
		}
	}
	finish := func(out turnOutcome) {
		var evs []pendingEvent
		if out.err != nil {
			evs = append(evs, pendingEvent{Type: guestapi.EventError, Turn: q.payload.Turn, Data: *out.err})
		}
		evs = append(evs, pendingEvent{Type: guestapi.EventIdle, Turn: q.payload.Turn, Data: guestapi.IdleData{
			Result: capText(out.result, maxTextEvent), DurationMS: time.Since(start).Milliseconds()}})
		emit(evs...)
		a.state.Handled, a.state.Running, a.state.RunningTurn = q.seq, 0, ""
		a.saveState()
	}
	if errors.Is(context.Cause(tctx), errInterrupted) {
		finish(turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorInterrupted, Message: "interrupted before it started"}})
		return
	}
	t, bad := a.prepare(q, emit)
	if bad != nil {
		finish(turnOutcome{err: bad})
		return
	}
	rn := a.runnerFor(t.desc)
	a.state.Running, a.state.RunningTurn = q.seq, q.payload.Turn
	a.saveState()
	out := rn.turn(tctx, t)
	a.state.Harness, a.state.Conversation = t.desc.Name, rn.conversation()
	if out.cancelled {
		if ctx.Err() != nil {
			a.saveState()
			return
		}
		out.err = &guestapi.ErrorData{Kind: guestapi.ErrorInterrupted, Message: "interrupted"}
	}
	finish(out)
}

func (a *Adapter) currentCancel() context.CancelCauseFunc {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == nil {
		return nil
	}
	return a.current.cancel
}

func (a *Adapter) saveState() {
	if err := writeTurnState(a.cfg.StateDir, a.state); err != nil {
		a.log.Error("record harness turn state", "err", err)
	}
}

// runnerFor returns the runner of d's protocol, continuing the recorded
// conversation when it is d's harness's.
func (a *Adapter) runnerFor(d guestapi.HarnessDescriptor) runner {
	key := d.Name + "@" + d.Version + "/" + d.Protocol
	if a.rn != nil && a.rnKey == key {
		return a.rn
	}
	if a.rn != nil {
		a.rn.close()
	}
	conv := ""
	if a.state.Harness == d.Name {
		conv = a.state.Conversation
	}
	pc := procConfig{
		stderrPath: filepath.Join(a.cfg.StateDir, harnessStderr),
		pidPath:    filepath.Join(a.cfg.StateDir, harnessPid),
		grace:      a.cfg.HarnessGrace, stall: a.cfg.HarnessStall, log: a.log,
	}
	switch d.Protocol {
	case guestapi.HarnessProtocolClaudeStreamJSON:
		a.rn = &claudeRunner{pc: pc, home: a.cfg.HarnessHome, session: conv}
	case guestapi.HarnessProtocolCodexJSON:
		a.rn = &codexRunner{pc: pc, home: a.cfg.HarnessHome, thread: conv}
	default:
		a.rn = &shellRunner{pc: pc}
	}
	a.rnKey = key
	return a.rn
}

// Status is the adapter's HarnessStatus.
func (a *Adapter) Status() guestapi.HarnessStatus {
	_, st := probeHarness(a.cfg.HarnessDir)
	gwURL, gwErr := a.gw.URL()
	st.Gateway = gwURL
	if st.State == guestapi.HarnessReady && gwErr != nil {
		st.State, st.Error = guestapi.HarnessFailed, gwErr.Error()
	}
	a.mu.Lock()
	if a.current != nil {
		st.Turn = a.current.turn
	}
	a.mu.Unlock()
	if head, _, err := a.events.head(); err == nil {
		st.LastSeq = head
	}
	return st
}

// probeHarness loads the bundle's descriptor and checks its entrypoint.
func probeHarness(dir string) (guestapi.HarnessDescriptor, guestapi.HarnessStatus) {
	if _, err := os.Lstat(filepath.Join(dir, guestapi.HarnessDescriptorFile)); errors.Is(err, os.ErrNotExist) {
		return guestapi.HarnessDescriptor{}, guestapi.HarnessStatus{State: guestapi.HarnessNone}
	}
	d, err := guestapi.LoadHarnessDescriptor(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, guestapi.HarnessStatus{State: guestapi.HarnessFailed, Error: err.Error()}
	}
	st := guestapi.HarnessStatus{State: guestapi.HarnessReady, Name: d.Name, Version: d.Version, Protocol: d.Protocol}
	entry := d.Argv(dir)[0]
	if fi, err := os.Stat(entry); err != nil {
		st.State, st.Error = guestapi.HarnessFailed, fmt.Sprintf("entrypoint: %v", err)
	} else if !fi.Mode().IsRegular() || unix.Access(entry, unix.X_OK) != nil {
		st.State, st.Error = guestapi.HarnessFailed, fmt.Sprintf("entrypoint %s is not an executable file", entry)
	}
	return d, st
}

// prepare resolves a prompt against the harness; the error is what to
// report instead of running it.
func (a *Adapter) prepare(q *queuedPrompt, emit func(...pendingEvent)) (*turnRun, *guestapi.ErrorData) {
	bad := func(format string, args ...any) *guestapi.ErrorData {
		return &guestapi.ErrorData{Kind: guestapi.ErrorBadPrompt, Message: fmt.Sprintf(format, args...)}
	}
	if q.err != nil {
		return nil, bad("%v", q.err)
	}
	d, st := probeHarness(a.cfg.HarnessDir)
	if st.State != guestapi.HarnessReady {
		return nil, &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: "no harness to run the prompt: " + harnessProblem(st)}
	}
	gwURL, gwErr := a.gw.URL()
	if gwErr == nil && gwURL == "" {
		gwErr = errGatewayClosed
	}
	if gwErr != nil {
		return nil, &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: gwErr.Error()}
	}
	p := q.payload
	t := &turnRun{name: p.Turn, text: p.Text, workdir: p.Workdir, model: p.Model, mode: p.Mode,
		argv: d.Argv(a.cfg.HarnessDir), desc: d, gateway: gwURL, emitFn: emit}
	if t.workdir == "" {
		t.workdir = a.cfg.WorkDir
	}
	if t.model == "" && len(d.Models) > 0 {
		t.model = d.Models[0]
	}
	if t.mode == "" && len(d.Modes) > 0 {
		t.mode = d.Modes[0]
	}
	switch {
	case p.Turn == "":
		return nil, bad("turn is required")
	case strings.TrimSpace(p.Text) == "":
		return nil, bad("text is empty")
	case d.Protocol == guestapi.HarnessProtocolShell && strings.ContainsAny(p.Text, "\r\n"):
		return nil, bad("a shell harness prompt is one line")
	case !filepath.IsAbs(t.workdir):
		return nil, bad("workdir %q is not absolute", t.workdir)
	case t.model == guestapi.AnyModel || len(d.Models) > 0 && !slices.Contains(d.Models, t.model) && !slices.Contains(d.Models, guestapi.AnyModel):
		return nil, bad("model %q: %s@%s offers %v", t.model, d.Name, d.Version, d.Models)
	case len(d.Modes) > 0 && !slices.Contains(d.Modes, t.mode):
		return nil, bad("mode %q: %s@%s offers %v", t.mode, d.Name, d.Version, d.Modes)
	}
	if fi, err := os.Stat(t.workdir); err != nil || !fi.IsDir() {
		return nil, bad("workdir %q is not a directory", t.workdir)
	}
	for k := range p.Env {
		if !envNameRE.MatchString(k) {
			return nil, bad("env name %q: want A-Z a-z 0-9 _ not starting with a digit", k)
		}
	}
	t.env = a.harnessEnv(d, p, gwURL)
	return t, nil
}

func harnessProblem(st guestapi.HarnessStatus) string {
	if st.State == guestapi.HarnessNone {
		return "no harness bundle is mounted"
	}
	return st.Error
}
