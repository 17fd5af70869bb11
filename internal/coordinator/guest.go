package coordinator

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// GuestTarget is how to reach a session's guest daemon: send requests
// through Route.Transport to Route.Prefix + a guest API path, with Headers.
type GuestTarget struct {
	Session domain.Session
	Route   hostlink.GuestRoute
}

// Headers are what every request to the guest carries: the session's
// epoch and the guest API version.
func (t GuestTarget) Headers() http.Header {
	h := t.Route.Header.Clone()
	h.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	return h
}

// Client is a typed guest API client over the target's route.
func (t GuestTarget) Client() *guestapi.Client {
	return guestapi.NewRouteClient(t.Route.Transport, t.Route.Prefix, t.Route.Header)
}

// Guest returns the route to a session's guest daemon. An Idle (or
// suspending, resuming, starting) session is brought to Active first: the
// caller waits, bounded by ResumeWait, instead of getting an error.
func (c *Coordinator) Guest(ctx context.Context, id domain.SessionID) (GuestTarget, error) {
	s, err := c.st.GetSession(ctx, id)
	if err != nil {
		return GuestTarget{}, err
	}
	if s.State != domain.SessionActive {
		if s, err = c.EnsureActive(ctx, s); err != nil {
			return GuestTarget{}, err
		}
	}
	if c.now().Sub(s.LastActivity) > touchEvery {
		if err := c.st.TouchSession(ctx, id, c.now()); err != nil {
			c.log.Warn("touch session", "session_id", id, "err", err)
		}
	}
	route, err := c.links.Guest(ctx, s.HostID, s.ID, s.Epoch)
	if err != nil {
		return GuestTarget{}, err
	}
	return GuestTarget{Session: s, Route: route}, nil
}

// GuestClient returns a guest API client for a session, resuming it first
// when it is Idle (as Guest does).
func (c *Coordinator) GuestClient(ctx context.Context, id domain.SessionID) (*guestapi.Client, error) {
	t, err := c.Guest(ctx, id)
	if err != nil {
		return nil, err
	}
	return t.Client(), nil
}

// touchEvery rate-limits activity writes from API calls.
const touchEvery = 5 * time.Second
