package hookapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// The sender puts X-Engrams-Timestamp (Unix seconds) and
// X-Engrams-Signature ("v1=" + hex HMAC-SHA256 of "TIMESTAMP.BODY" keyed
// by the hook's whole secret, whsec_ included; several values,
// comma-separated, during a rotation) on each delivery. X-Engrams-Delivery
// is a hint for logs: the signature does not cover it, so deliveries are
// known by what it covers.
const (
	HeaderTimestamp = apiv1.HeaderHookTimestamp
	HeaderSignature = apiv1.HeaderHookSignature
	HeaderDelivery  = apiv1.HeaderHookDelivery
	// Window is how far a delivery's timestamp may be from now.
	Window = 5 * time.Minute
	// MaxBody bounds a delivery's body (the trigger payload).
	MaxBody = 256 << 10
	// keepFor outlasts the window both ways: a delivery replayed with its
	// timestamp is refused as stale before it is forgotten.
	keepFor = 2*Window + time.Minute
)

// Sign is the X-Engrams-Signature of body sent at ts with secret.
func Sign(secret []byte, ts int64, body []byte) string {
	return connector.HMAC(secret, "v1=", []byte(strconv.FormatInt(ts, 10)+"."), body)
}

// Store finds the automation a hook's slug names (the store).
type Store interface {
	GetAutomationBySlug(ctx context.Context, slug string) (domain.Automation, error)
}

// Sealer opens hook secrets (secret.Sealer).
type Sealer interface {
	Open(ciphertext, associated []byte) ([]byte, error)
}

// Deps are a Receiver's collaborators.
type Deps struct {
	Store  Store
	Sealer Sealer // nil: every delivery is refused (no secret can be opened)
	Now    func() time.Time
}

// Receiver takes signed webhook deliveries.
type Receiver struct {
	st   Store
	seal Sealer
	now  func() time.Time
}

// New returns a Receiver.
func New(deps Deps) (*Receiver, error) {
	if deps.Store == nil {
		return nil, errors.New("hookapp: Store is required")
	}
	h := &Receiver{st: deps.Store, seal: deps.Sealer, now: deps.Now}
	if h.now == nil {
		h.now = time.Now
	}
	return h, nil
}

// Source implements connector.Receiver.
func (h *Receiver) Source() connector.Source { return connector.SourceHook }

// MaxBody implements connector.Receiver.
func (h *Receiver) MaxBody() int64 { return MaxBody }

// Verify implements connector.Receiver: an unknown slug is refused the
// same way as a bad signature, so slugs cannot be probed.
func (h *Receiver) Verify(ctx context.Context, req connector.Request) (connector.Verified, error) {
	a, err := h.st.GetAutomationBySlug(ctx, req.Slug)
	if errors.Is(err, domain.ErrNotFound) {
		// The same work as a hook's check, so its time says nothing either.
		_ = connector.VerifyHMAC([]byte("no such hook"), req.Header.Get(HeaderSignature), "v1=", true, []byte(req.Header.Get(HeaderTimestamp)), req.Body)
		return connector.Verified{}, fmt.Errorf("%w: no such hook", connector.ErrBadSignature)
	}
	if err != nil {
		return connector.Verified{}, err
	}
	var secret []byte
	if h.seal != nil && len(a.HookSecret) > 0 {
		if secret, err = h.seal.Open(a.HookSecret, domain.SealedHookSecret.AssociatedData(string(a.ID))); err != nil {
			return connector.Verified{}, fmt.Errorf("open the secret of hook %s: %w", req.Slug, err)
		}
	}
	defer clear(secret)
	at, err := connector.ParseUnix(req.Header.Get(HeaderTimestamp))
	if err != nil {
		return connector.Verified{}, err
	}
	if err := connector.CheckTime(at, h.now(), Window); err != nil {
		return connector.Verified{}, err
	}
	signed := []byte(strconv.FormatInt(at.Unix(), 10) + ".")
	if err := connector.VerifyHMAC(secret, req.Header.Get(HeaderSignature), "v1=", true, signed, req.Body); err != nil {
		return connector.Verified{}, err
	}
	covered := append([]byte(string(a.ID)+"\x00"), signed...) // one hook's delivery is not another's
	return connector.Verified{Covered: append(covered, req.Body...), KeepFor: keepFor, Automation: a.ID,
		Hint: connector.Clip(req.Header.Get(HeaderDelivery), 200)}, nil
}

// Decode implements connector.Receiver: the body is the run's trigger
// payload, its "inputs" object (if any) the run's inputs.
func (h *Receiver) Decode(_ context.Context, v connector.Verified, req connector.Request) (connector.Meaning, error) {
	payload := json.RawMessage(req.Body)
	var body struct {
		Inputs map[string]any `json:"inputs"`
	}
	if len(req.Body) == 0 {
		payload = json.RawMessage(`{}`)
	} else if err := json.Unmarshal(req.Body, &body); err != nil {
		return connector.Meaning{}, fmt.Errorf("%w: the body must be a JSON object: %v", domain.ErrInvalid, err)
	}
	return connector.Meaning{Starts: []connector.Start{{Trigger: TriggerKind, Automation: v.Automation, Payload: payload, Inputs: body.Inputs}}}, nil
}

// TriggerKind is the trigger a hook starts (automations.TriggerWebhook).
const TriggerKind = "webhook"
