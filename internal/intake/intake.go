package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Deliveries remembers the deliveries seen (the store).
type Deliveries interface {
	RecordDelivery(ctx context.Context, source, key string, at, expires time.Time) (bool, error)
	ForgetDelivery(ctx context.Context, source, key string) error
}

// Runs starts and records the runs deliveries ask for (autorun.Runner).
type Runs interface {
	StartTriggered(ctx context.Context, s connector.Start, payload json.RawMessage, key string) ([]connector.Started, error)
	RecordRefusal(ctx context.Context, ref connector.Refusal, payload json.RawMessage, key string) (connector.Started, error)
	RunOfDelivery(ctx context.Context, id domain.AutomationID, key string) (domain.AutomationRun, error)
}

// Deps are a Pipeline's collaborators.
type Deps struct {
	Receivers  []connector.Receiver
	Deliveries Deliveries
	Runs       Runs // nil: deliveries are refused, no runs can start
	Logger     *slog.Logger
	Now        func() time.Time
}

// Config bounds what a request may send before anything is verified.
type Config struct {
	// MaxHeaderBytes bounds a delivery's headers, names and values
	// together (default 16 KiB: no service sends more).
	MaxHeaderBytes int
	// BodyTimeout is how long a body may take to arrive (default 10s): a
	// body that stalls is answered 408.
	BodyTimeout time.Duration
}

// Pipeline takes deliveries.
type Pipeline struct {
	cfg  Config
	rcv  map[connector.Source]connector.Receiver
	seen Deliveries
	runs Runs
	log  *slog.Logger
	now  func() time.Time
}

// New returns a Pipeline.
func New(cfg Config, deps Deps) (*Pipeline, error) {
	if deps.Deliveries == nil {
		return nil, errors.New("intake: Deliveries is required")
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 16 << 10
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 10 * time.Second
	}
	p := &Pipeline{cfg: cfg, rcv: map[connector.Source]connector.Receiver{}, seen: deps.Deliveries, runs: deps.Runs, log: deps.Logger, now: deps.Now}
	for _, r := range deps.Receivers {
		if _, dup := p.rcv[r.Source()]; dup {
			return nil, fmt.Errorf("intake: two receivers of %s", r.Source())
		}
		p.rcv[r.Source()] = r
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

// Outcome is what a delivery did.
type Outcome struct {
	Answer    any    // answered as it is (a challenge, a ping)
	Ignored   string // why it started nothing
	Duplicate bool   // seen before: nothing started again
	Runs      []connector.Started
}

// ErrNoRuns is a delivery's error when this server runs no automations.
var ErrNoRuns = errors.New("automation runs are not running on this server")

// Deliver takes one delivery of src: verified, its meaning decoded,
// deduplicated on the hash of what its signature covers, its runs
// started or recorded as refused, then what it does once.
func (p *Pipeline) Deliver(ctx context.Context, src connector.Source, req connector.Request) (Outcome, error) {
	rcv, ok := p.rcv[src]
	if !ok {
		return Outcome{}, fmt.Errorf("%w: %s", connector.ErrNotConfigured, src)
	}
	v, err := rcv.Verify(ctx, req)
	if err != nil {
		return Outcome{}, err
	}
	return p.deliver(ctx, rcv, v, req)
}

// DeliverVouched takes a delivery of src that its transport vouches for
// (Slack's Socket Mode, opened with the app token): everything Deliver
// does but the signature check.
func (p *Pipeline) DeliverVouched(ctx context.Context, src connector.Source, v connector.Verified, req connector.Request) error {
	rcv, ok := p.rcv[src]
	if !ok {
		return fmt.Errorf("%w: %s", connector.ErrNotConfigured, src)
	}
	if int64(len(req.Body)) > rcv.MaxBody() {
		return fmt.Errorf("%w: a %s delivery of %d bytes, at most %d", domain.ErrInvalid, src, len(req.Body), rcv.MaxBody())
	}
	_, err := p.deliver(ctx, rcv, v, req)
	return err
}

// deliver is a verified delivery's meaning, deduplicated and started.
func (p *Pipeline) deliver(ctx context.Context, rcv connector.Receiver, v connector.Verified, req connector.Request) (Outcome, error) {
	src := rcv.Source()
	m, err := rcv.Decode(ctx, v, req)
	if err != nil {
		return Outcome{}, err
	}
	switch {
	case m.Answer != nil:
		return Outcome{Answer: m.Answer}, nil
	case len(m.Starts) == 0 && len(m.Refusals) == 0 && m.After == nil:
		return Outcome{Ignored: m.Ignored}, nil
	case p.runs == nil:
		return Outcome{}, ErrNoRuns
	}
	key := Key(src, v.Covered)
	now := p.now()
	first, err := p.seen.RecordDelivery(ctx, string(src), key, now, now.Add(v.KeepFor))
	if err != nil {
		return Outcome{}, err
	}
	log := p.log.With("source", src, "delivery_key", key, "delivery_hint", v.Hint)
	if !first {
		log.Info("delivery seen before: nothing started")
		out := Outcome{Duplicate: true}
		if v.Automation != "" {
			if run, err := p.runs.RunOfDelivery(ctx, v.Automation, key); err == nil {
				out.Runs = []connector.Started{{Run: run}}
			}
		}
		return out, nil
	}
	started, err := p.start(ctx, m, key)
	if err != nil && len(started) == 0 {
		// Nothing started: the delivery is forgotten, so a retry (Slack's,
		// a redelivery, a hook enabled again) does it then.
		if ferr := p.seen.ForgetDelivery(context.WithoutCancel(ctx), string(src), key); ferr != nil {
			log.Warn("forget a delivery that started nothing", "err", ferr)
		}
		return Outcome{}, err
	}
	if err != nil {
		log.Warn("start a delivery's runs", "err", err)
	}
	if m.After != nil {
		if err := m.After(ctx, started); err != nil {
			log.Warn("after a delivery", "err", err)
		}
	}
	return Outcome{Ignored: m.Ignored, Runs: started}, nil
}

// start starts m's runs and records its refusals, each under key. A
// refusal that cannot be recorded (the run it names is gone) is logged:
// the refusal stands, and its reply is still made.
func (p *Pipeline) start(ctx context.Context, m connector.Meaning, key string) ([]connector.Started, error) {
	var out []connector.Started
	var errs []error
	for _, s := range m.Starts {
		payload, err := json.Marshal(s.Payload)
		if err != nil {
			errs = append(errs, fmt.Errorf("encode a %s payload: %w", s.Trigger, err))
			continue
		}
		st, err := p.runs.StartTriggered(ctx, s, payload, key)
		out = append(out, st...)
		errs = append(errs, err)
	}
	for _, r := range m.Refusals {
		payload, err := json.Marshal(r.Payload)
		if err == nil {
			var st connector.Started
			if st, err = p.runs.RecordRefusal(ctx, r, payload, key); err == nil {
				out = append(out, st)
			}
		}
		if err != nil {
			p.log.Warn("record a refusal", "run_id", r.Run, "reason", r.Reason, "err", err)
		}
	}
	return out, errors.Join(errs...)
}

// Key is the dedup key of a delivery of src whose signature covers
// covered: a retry or a replay of the same signed bytes has the same key,
// whatever id or other header it carries.
func Key(src connector.Source, covered []byte) string {
	sum := sha256.Sum256(covered)
	return string(src) + ":" + hex.EncodeToString(sum[:])
}
