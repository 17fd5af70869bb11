package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// Host access: who may hold a host link.
//
// One link at a time holds a host across every replica (the host row
// records it: store.ClaimHostLink). A second connection of the same host —
// a second agent started with the host's token — is refused with 409
// already_connected while the holder is live. It is admitted only when
//   - no link holds the host (the last one ended and its replica released it),
//   - the holder has not heartbeated for the lease (nor connected within it):
//     its agent has paused every machine by then, so it writes nothing, or
//   - the holder is gone: its replica says it does not hold it, or its host
//     does not answer a ping within 2 s (hostlink.Server.Holds).
// A replica that cannot be asked counts as holding it until the lease runs
// out. So an agent restarted after a crash gets back in at once, and a
// session whose host's link flapped is never handed to recovery by a
// stranger's registration.
//
// Every register and heartbeat re-checks the link: its token must still be
// valid, its host enabled and the link still the holder; otherwise the
// request is refused (401, 403 or 409 with a hostlink code) and the link
// closed. Revoking a host's token, disabling or deleting a host notifies
// TopicHosts; every replica re-checks the links it holds on that wake and
// every LinkRecheck, and closes the ones no longer allowed, even when the
// host sends nothing.
//
// Revocation moves the host to lost at once and hands its sessions to
// recover ops (Idle from the head snapshot, else Dead) instead of waiting
// for HostLostAfter: nothing the host could still send is accepted (its
// link is closed within seconds; until then its heartbeats, registrations
// and gateway requests are refused by the checks above and its session
// writes are fenced by the recover op's epoch), so waiting would protect
// nothing, and a revoked host is not trusted to honour its lease anyway.

// TopicHosts is notified when a host's access changes (a token revoked, a
// host disabled or deleted): replicas re-check the links they hold.
const TopicHosts = "hosts"

// Links is this replica's end of the host links (the hostlink Router over
// its Server).
type Links interface {
	// Links lists the links this replica holds.
	Links() []hostlink.LinkInfo
	// CloseLink ends this replica's link linkID of hostID, if it holds it.
	CloseLink(hostID domain.HostID, linkID string) bool
	// LinkHeld reports whether replica replicaID (at addr) holds the live
	// link linkID of hostID; an error when it cannot tell.
	LinkHeld(ctx context.Context, hostID domain.HostID, linkID, replicaID, addr string) (bool, error)
}

// Access decides who may hold a host link and takes hosts out of
// service: the host-link server's Authenticate, Admit and Release, the
// re-checks of register and heartbeat, the link guard, and the admin's
// disable, delete and revoke. Coordinator.Access returns the replica's.
type Access struct {
	cfg     Config
	st      Store
	ends    Links
	log     *slog.Logger
	clock   func() time.Time
	touched touches
	// recoverFn hands a lost host's sessions to recover ops (the monitor's
	// recoverHost) and returns how many.
	recoverFn func(ctx context.Context, h domain.Host) (int, error)
}

func (c *Access) now() time.Time       { return c.clock() }
func (c *Access) lease() time.Duration { return c.cfg.Lease() }

func (c *Access) recoverHost(ctx context.Context, h domain.Host) (int, error) {
	return c.recoverFn(ctx, h)
}

func (c *Access) wake(ctx context.Context, topic string) {
	if err := c.st.Notify(ctx, topic); err != nil {
		c.log.Warn("notify failed; waiters fall back to polling", "topic", topic, "err", err)
	}
}

// tokenTouchEvery bounds how often a token's last use is written.
const tokenTouchEvery = time.Minute

// touches rate-limits last-use writes, per token.
type touches struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether token id's last use should be written at now.
func (t *touches) due(id string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[string]time.Time{}
	}
	if now.Sub(t.last[id]) < tokenTouchEvery {
		return false
	}
	t.last[id] = now
	return true
}

func (c *Access) touchToken(ctx context.Context, id string) {
	if id == "" || !c.touched.due(id, c.now()) {
		return
	}
	if err := c.st.TouchToken(ctx, id, c.now()); err != nil {
		c.log.Warn("record token use", "token_id", id, "err", err)
	}
}

// AuthenticateHost maps a host token to its host and token ids, and
// records its use.
func (c *Access) AuthenticateHost(ctx context.Context, secret string) (hostlink.Credential, error) {
	t, err := c.st.TokenByHash(ctx, HashToken(secret))
	if errors.Is(err, store.ErrNotFound) || (err == nil && t.Kind != domain.TokenHost) {
		return hostlink.Credential{}, fmt.Errorf("%w: not a valid host token (create one with `engrams host create NAME`)", ErrUnauthorized)
	}
	if err != nil {
		return hostlink.Credential{}, fmt.Errorf("authenticate host: %w", err)
	}
	c.touchToken(ctx, t.ID)
	return hostlink.Credential{HostID: t.HostID, TokenID: t.ID}, nil
}

// AdmitLink admits l as the link holding its host, or refuses it with a
// *hostlink.Refusal (see the rules above).
func (c *Access) AdmitLink(ctx context.Context, l hostlink.LinkInfo) error {
	h, err := c.st.GetHost(ctx, l.HostID)
	if errors.Is(err, store.ErrNotFound) {
		return &hostlink.Refusal{Status: http.StatusUnauthorized, Code: hostlink.CodeUnauthorized, Msg: fmt.Sprintf("host %s does not exist", l.HostID)}
	}
	if err != nil {
		return fmt.Errorf("admit link of host %s: %w", l.HostID, err)
	}
	if ref := accessRefusal(h); ref != nil {
		return ref
	}
	now := c.now()
	claim := store.LinkClaim{HostID: l.HostID, Link: domain.HostLink{ID: l.ID, Remote: l.Remote, At: now},
		ReplicaID: c.cfg.ReplicaID, ReplicaAddr: c.cfg.ReplicaAddr, StaleBefore: now.Add(-c.lease())}
	for {
		held, err := c.st.ClaimHostLink(ctx, claim)
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("admit link of host %s: %w", l.HostID, err)
		}
		if ref := accessRefusal(held); ref != nil {
			return ref
		}
		if held.Link.ID == "" { // no holder: the host may not work, its tokens are revoked
			return &hostlink.Refusal{Status: http.StatusUnauthorized, Code: hostlink.CodeUnauthorized, Msg: fmt.Sprintf("host %s has no valid token", h.Name)}
		}
		if claim.Replace != "" || c.ends == nil || !c.holderGone(ctx, held) {
			return c.alreadyConnected(held)
		}
		claim.Replace = held.Link.ID
	}
}

// holderGone reports whether the link holding h is known to be gone. A
// holder recorded by another replica at this replica's own address is
// gone: this replica serves that address now (it restarted after a crash).
func (c *Access) holderGone(ctx context.Context, h domain.Host) bool {
	if h.ReplicaID != c.cfg.ReplicaID && h.ReplicaAddr != "" && h.ReplicaAddr == c.cfg.ReplicaAddr {
		return true
	}
	live, err := c.ends.LinkHeld(ctx, h.ID, h.Link.ID, h.ReplicaID, h.ReplicaAddr)
	if err != nil {
		c.log.Info("cannot tell whether the link holding a host is live; it holds the host until its lease runs out",
			"host_id", h.ID, "link_id", h.Link.ID, "holder_replica", h.ReplicaID, "err", err)
		return false
	}
	return !live
}

func (c *Access) alreadyConnected(h domain.Host) *hostlink.Refusal {
	last := h.LastHeartbeat
	if h.Link.At.After(last) {
		last = h.Link.At
	}
	wait := max(c.lease()-c.now().Sub(last), time.Second)
	return hostlink.AlreadyConnected(h.Name, h.Link.Remote, h.Link.At, wait)
}

// ReleaseLink ends l's hold on its host once the link has ended.
func (c *Access) ReleaseLink(ctx context.Context, l hostlink.LinkInfo) {
	if err := c.st.ReleaseHostLink(ctx, l.HostID, l.ID); err != nil {
		c.log.Warn("release host link", "host_id", l.HostID, "link_id", l.ID, "err", err)
	}
}

// accessRefusal is why an admin does not let h work, or nil.
func accessRefusal(h domain.Host) *hostlink.Refusal {
	switch {
	case !h.DeletedAt.IsZero():
		return &hostlink.Refusal{Status: http.StatusForbidden, Code: hostlink.CodeHostDeleted,
			Msg: fmt.Sprintf("host %s was deleted: register a new host (engrams host create) and give its agent the new token", h.Name)}
	case h.Disabled:
		return &hostlink.Refusal{Status: http.StatusForbidden, Code: hostlink.CodeHostDisabled,
			Msg: fmt.Sprintf("host %s is disabled: enable it with `engrams host enable %s`", h.Name, h.Name)}
	}
	return nil
}

// linkRefusal is why link l may no longer hold host h (read with its
// token tok; ok=false when the token is unknown), or nil. A link without
// an id or token (handlers mounted without a hostlink.Server, in tests) is
// checked for the host only.
func linkRefusal(h domain.Host, tok domain.Token, ok bool, l hostlink.LinkInfo) *hostlink.Refusal {
	if ref := accessRefusal(h); ref != nil {
		return ref
	}
	if l.TokenID != "" && (!ok || !tok.RevokedAt.IsZero() || tok.Kind != domain.TokenHost || tok.HostID != h.ID) {
		return &hostlink.Refusal{Status: http.StatusUnauthorized, Code: hostlink.CodeUnauthorized,
			Msg: fmt.Sprintf("the token host %s linked with was revoked", h.Name)}
	}
	if l.ID != "" && h.Link.ID != l.ID {
		return &hostlink.Refusal{Status: http.StatusConflict, Code: hostlink.CodeSuperseded,
			Msg: fmt.Sprintf("this link no longer holds host %s (another link took over, or its hold was released)", h.Name)}
	}
	return nil
}

// checkLink re-checks the link a host request came over (register and
// heartbeat): a refusal, or an error when the store cannot tell.
func (c *Access) checkLink(ctx context.Context, hostID domain.HostID) (*hostlink.Refusal, error) {
	l, _ := hostlink.LinkFrom(ctx)
	h, err := c.st.GetHost(ctx, hostID)
	if errors.Is(err, store.ErrNotFound) {
		return &hostlink.Refusal{Status: http.StatusUnauthorized, Code: hostlink.CodeUnauthorized, Msg: fmt.Sprintf("host %s does not exist", hostID)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check link of host %s: %w", hostID, err)
	}
	var tok domain.Token
	found := true
	if l.TokenID != "" {
		tok, err = c.st.GetToken(ctx, l.TokenID)
		if errors.Is(err, store.ErrNotFound) {
			found, err = false, nil
		}
		if err != nil {
			return nil, fmt.Errorf("check link of host %s: %w", hostID, err)
		}
	}
	if ref := linkRefusal(h, tok, found, l); ref != nil {
		return ref, nil
	}
	c.touchToken(ctx, l.TokenID)
	return nil, nil
}

// refuseLink answers a host's request with ref, then closes the link it
// came over (the answer is on the wire first: it has a length and is
// flushed, and a flushed stream write has been sent).
func (c *Access) refuseLink(w http.ResponseWriter, r *http.Request, hostID domain.HostID, ref *hostlink.Refusal) {
	c.log.Warn("host link refused", "host_id", hostID, "code", ref.Code, "reason", ref.Msg, "path", r.URL.Path)
	hostlink.WriteRefusal(w, ref)
	_ = http.NewResponseController(w).Flush()
	if l, ok := hostlink.LinkFrom(r.Context()); ok && l.ID != "" && c.ends != nil {
		c.ends.CloseLink(hostID, l.ID)
	}
}

// guardLinks closes the links this replica holds that may no longer hold
// their host, on every TopicHosts wake-up and every LinkRecheck.
func (c *Access) guardLinks(ctx context.Context) {
	if c.ends == nil {
		return
	}
	sub := c.st.Subscribe(ctx, TopicHosts)
	t := time.NewTicker(c.cfg.LinkRecheck)
	defer t.Stop()
	for {
		if err := c.recheckLinks(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("re-check host links", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sub:
			if !ok {
				return
			}
		case <-t.C:
		}
	}
}

// recheckLinks is one pass of guardLinks.
func (c *Access) recheckLinks(ctx context.Context) error {
	links := c.ends.Links()
	if len(links) == 0 {
		return nil
	}
	hosts, err := c.st.ListHosts(ctx)
	if err != nil {
		return fmt.Errorf("list hosts: %w", err)
	}
	toks, err := c.st.ListTokens(ctx, store.TokenFilter{Kind: domain.TokenHost})
	if err != nil {
		return fmt.Errorf("list tokens: %w", err)
	}
	byHost := make(map[domain.HostID]domain.Host, len(hosts))
	for _, h := range hosts {
		byHost[h.ID] = h
	}
	byID := make(map[string]domain.Token, len(toks))
	for _, t := range toks {
		byID[t.ID] = t
	}
	for _, l := range links {
		h, ok := byHost[l.HostID]
		if !ok {
			h = domain.Host{ID: l.HostID, Name: string(l.HostID), DeletedAt: c.now()}
		}
		tok, found := byID[l.TokenID]
		if ref := linkRefusal(h, tok, found, l); ref != nil && c.ends.CloseLink(l.HostID, l.ID) {
			c.log.Warn("host link closed", "host_id", l.HostID, "link_id", l.ID, "code", ref.Code, "reason", ref.Msg)
		}
	}
	return nil
}

// DisableHost disables a host (or enables it again). A disabled host's
// link is closed on whichever replica holds it, nothing is placed on it,
// the gateway refuses it and its sessions move through HostLost at once.
// An enabled host works again once its agent reconnects.
// domain.ErrNotFound for an unknown or deleted host.
func (c *Access) DisableHost(ctx context.Context, id domain.HostID, disabled bool) (domain.Host, error) {
	h, err := c.st.DisableHost(ctx, id, disabled)
	if err != nil {
		return h, err
	}
	if disabled {
		c.log.Info("host disabled", "host_id", id)
		c.accessRevoked(ctx, h)
	} else {
		c.log.Info("host enabled", "host_id", id)
	}
	return h, nil
}

// DeleteHost soft-deletes a host: its tokens are revoked, its link closed
// and its sessions handed to recovery as DisableHost does; its name is
// free again. domain.ErrNotFound for an unknown or deleted host.
func (c *Access) DeleteHost(ctx context.Context, id domain.HostID) (domain.Host, error) {
	h, err := c.st.DeleteHost(ctx, id, c.now())
	if err != nil {
		return h, err
	}
	c.log.Info("host deleted", "host_id", id)
	c.accessRevoked(ctx, h)
	return h, nil
}

// RevokeToken revokes a token; revoking a host's token also ends its host's
// link and hands its sessions to recovery (as DisableHost does).
// domain.ErrNotFound for an unknown token.
func (c *Access) RevokeToken(ctx context.Context, id string) error {
	t, err := c.st.GetToken(ctx, id)
	if err != nil {
		return err
	}
	if err := c.st.RevokeToken(ctx, id, c.now()); err != nil {
		return err
	}
	if t.Kind != domain.TokenHost {
		return nil
	}
	h, err := c.st.MarkHostLost(ctx, t.HostID)
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	c.log.Info("host token revoked", "host_id", t.HostID, "token_id", id)
	c.accessRevoked(ctx, h)
	return nil
}

// accessRevoked tells every replica that h lost its access (each closes
// the link it holds), closes it here at once and hands h's sessions to
// recover ops. The store already moved h to lost.
func (c *Access) accessRevoked(ctx context.Context, h domain.Host) {
	c.wake(ctx, TopicHosts)
	if c.ends != nil {
		c.ends.CloseLink(h.ID, "")
	}
	if h.State != domain.HostLost {
		return // new: it never ran anything
	}
	n, err := c.recoverHost(ctx, h)
	if err != nil {
		c.log.Error("hand sessions of a host without access to recovery; the monitor retries", "host_id", h.ID, "err", err)
	}
	if n > 0 {
		c.wake(ctx, TopicOps)
	}
}
