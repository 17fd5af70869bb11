package autorun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/domain"
)

// MaxHookBody bounds a webhook delivery's body.
const MaxHookBody = MaxTriggerBytes

// ErrBadSignature is the category of a refused webhook delivery (401):
// automations.ErrBadSignature, or no such hook (said the same way, so
// slugs cannot be probed).
var ErrBadSignature = automations.ErrBadSignature

// Delivery is one webhook request as received.
type Delivery struct {
	Slug, Timestamp, Signature, ID string
	Body                           []byte
}

// Deliver verifies a signed webhook delivery and starts a run of its
// automation with the body as the trigger payload (and its "inputs"
// object, if any, as the inputs). A delivery seen before (by its
// X-Engrams-Delivery id, else by its signature) answers the run it
// started.
func (r *Runner) Deliver(ctx context.Context, d Delivery) (Started, error) {
	a, err := r.st.GetAutomationBySlug(ctx, d.Slug)
	if errors.Is(err, domain.ErrNotFound) {
		return Started{}, fmt.Errorf("%w: no such hook", ErrBadSignature)
	}
	if err != nil {
		return Started{}, err
	}
	if len(d.Body) > MaxHookBody {
		return Started{}, fmt.Errorf("%w: the body has %d bytes, at most %d", domain.ErrInvalid, len(d.Body), MaxHookBody)
	}
	var secret []byte
	if r.seal != nil && len(a.HookSecret) > 0 {
		if secret, err = r.seal.Open(a.HookSecret, domain.SealedHookSecret.AssociatedData(string(a.ID))); err != nil {
			return Started{}, fmt.Errorf("open the secret of hook %s: %w", d.Slug, err)
		}
	}
	if err := automations.VerifyWebhook(secret, d.Timestamp, d.Signature, d.Body, r.now()); err != nil {
		return Started{}, err
	}
	if !a.Enabled {
		return Started{}, fmt.Errorf("%w: automation %s is disabled", domain.ErrNotActive, a.Name)
	}
	v, err := r.view(ctx, a)
	if err != nil {
		return Started{}, err
	}
	var body struct {
		Inputs map[string]any `json:"inputs"`
	}
	if len(d.Body) > 0 {
		if err := json.Unmarshal(d.Body, &body); err != nil {
			return Started{}, fmt.Errorf("%w: the body must be a JSON object: %v", domain.ErrInvalid, err)
		}
	}
	key := "hook:" + d.ID
	if d.ID == "" {
		sum := sha256.Sum256([]byte(d.Signature))
		key = "hook-signature:" + hex.EncodeToString(sum[:16])
	} else if len(d.ID) > 200 {
		return Started{}, fmt.Errorf("%w: %s is longer than 200 bytes", domain.ErrInvalid, automations.HeaderWebhookDelivery)
	}
	return r.start(ctx, v, RunRequest{Kind: automations.TriggerWebhook, Inputs: body.Inputs, Trigger: d.Body, DedupKey: key})
}
