package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
)

// check asserts the invariants on a frozen world (after synctest.Wait):
// one live machine per session, legal transitions only, every Idle session
// has a committed head snapshot whose chunks all exist. It returns every
// violation, including those the hosts saw between steps.
func (s *sim) check() []string {
	ctx := context.Background()
	s.w.mu.Lock()
	bad := slices.Clone(s.w.bad)
	s.w.bad = nil
	now := time.Now()
	live := map[string][]string{}
	for _, h := range s.w.hosts {
		for sid, m := range h.machines {
			if h.liveLocked(m, now) {
				live[sid] = append(live[sid], fmt.Sprintf("%s@%d", h.name, m.epoch))
			}
		}
	}
	s.w.mu.Unlock()
	for sid, on := range live {
		if len(on) > 1 {
			sort.Strings(on)
			bad = append(bad, fmt.Sprintf("session %s is live on %d hosts: %s", sid, len(on), strings.Join(on, ", ")))
		}
	}
	ss, err := s.st.ListSessions(ctx, domain.SessionFilter{})
	if err != nil {
		return append(bad, "list sessions: "+err.Error())
	}
	for _, sess := range ss {
		bad = append(bad, s.checkEvents(ctx, sess)...)
		if sess.State == domain.SessionIdle {
			bad = append(bad, s.checkHead(ctx, sess)...)
		}
	}
	return bad
}

// checkEvents replays the session's new "state" events through
// lifecycle.Transition: each must start where the last one ended and be
// legal, and the last must end in the session's state.
func (s *sim) checkEvents(ctx context.Context, sess domain.Session) []string {
	evs, err := s.st.ListEvents(ctx, sess.ID, s.checked[sess.ID], 0)
	if err != nil {
		return []string{fmt.Sprintf("list events of %s: %v", sess.ID, err)}
	}
	var bad []string
	for _, ev := range evs {
		s.checked[sess.ID] = ev.Seq
		if ev.Type != "state" {
			continue
		}
		var d struct {
			From  domain.SessionState `json:"from"`
			To    domain.SessionState `json:"to"`
			Event lifecycle.Event     `json:"event"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			bad = append(bad, fmt.Sprintf("session %s event %d: %v", sess.ID, ev.Seq, err))
			continue
		}
		prev, ok := s.state[sess.ID]
		if !ok {
			prev = domain.SessionCreated
		}
		to, err := lifecycle.Transition(d.From, d.Event)
		switch {
		case d.From != prev:
			bad = append(bad, fmt.Sprintf("session %s event %d: %s from %s, but it was %s", sess.ID, ev.Seq, d.Event, d.From, prev))
		case err != nil || to != d.To:
			bad = append(bad, fmt.Sprintf("session %s event %d: illegal %s -%s-> %s (%v)", sess.ID, ev.Seq, d.From, d.Event, d.To, err))
		}
		s.state[sess.ID] = d.To
	}
	if cur, ok := s.state[sess.ID]; (ok && cur != sess.State) || (!ok && sess.State != domain.SessionCreated) {
		bad = append(bad, fmt.Sprintf("session %s is %s but its events end in %s", sess.ID, sess.State, cur))
	}
	return bad
}

// checkHead: an Idle session's head snapshot is committed and every chunk
// it names is in the blob store.
func (s *sim) checkHead(ctx context.Context, sess domain.Session) []string {
	if sess.HeadSnapshotID == "" {
		return []string{fmt.Sprintf("session %s is idle without a head snapshot", sess.ID)}
	}
	snap, err := s.st.GetSnapshot(ctx, sess.HeadSnapshotID)
	if err != nil {
		return []string{fmt.Sprintf("session %s is idle; head snapshot %s: %v", sess.ID, sess.HeadSnapshotID, err)}
	}
	var man manifest
	if err := json.Unmarshal(snap.Manifests, &man); err != nil || len(man.Chunks) == 0 {
		return []string{fmt.Sprintf("session %s head snapshot %s: manifest %s (%v)", sess.ID, snap.ID, snap.Manifests, err)}
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	var bad []string
	for _, k := range man.Chunks {
		if !s.w.chunks[k] {
			bad = append(bad, fmt.Sprintf("session %s is idle at snapshot %s whose chunk %s is missing", sess.ID, snap.ID, k))
		}
	}
	return bad
}

// quiesce ends the faults (hosts back, links healed, uploads fast) and
// brings every session to rest with its outbox delivered: each round it
// nudges a session that is not at rest with one more item (which resumes
// an Idle session and delivers to an Active one). It returns the sessions
// that never came to rest.
func (s *sim) quiesce() []domain.SessionID {
	for _, h := range s.w.hosts {
		if _, ok := s.heals[h]; ok {
			s.heals[h] = time.Now()
		}
		if at, ok := s.backs[h]; ok && !s.opts.longCrash {
			s.backs[h] = time.Now()
		} else if ok && at.Before(time.Now()) {
			s.backs[h] = time.Now()
		}
		s.w.mu.Lock()
		h.chunkWait, h.fetchWait = 0, 0
		s.w.mu.Unlock()
	}
	s.due()
	s.logf("quiesce: every host up, every link healed, fast uploads")
	s.advance(10 * time.Second)
	var restless []domain.SessionID
	for round := range 8 {
		synctest.Wait() // judge a frozen world, as check does
		restless = s.restless()
		if len(restless) == 0 {
			return nil
		}
		for _, id := range restless {
			s.logf("quiesce round %d: %s", round, s.put(id, "nudge"))
		}
		s.advance(8 * time.Second)
	}
	return restless
}

// restless lists sessions that are not terminal and not at rest (Active or
// Idle with no op in flight and no pending outbox item). An op in flight
// may hold the machine paused (a capture uploading at a slow rate it read
// before the quiesce), so its session is not at rest yet.
func (s *sim) restless() []domain.SessionID {
	ctx := context.Background()
	var out []domain.SessionID
	for _, id := range s.sessions {
		sess, err := s.st.GetSession(ctx, id)
		if err != nil {
			out = append(out, id)
			continue
		}
		switch sess.State {
		case domain.SessionCompleted, domain.SessionDead:
			continue
		case domain.SessionActive, domain.SessionIdle:
			if !s.busy(ctx, id) {
				continue
			}
		}
		out = append(out, id)
	}
	return out
}

// busy reports whether a session has an op pending or running or an outbox
// item pending (or either could not be read).
func (s *sim) busy(ctx context.Context, id domain.SessionID) bool {
	ops, err := s.st.ListOps(ctx, id)
	if err != nil || slices.ContainsFunc(ops, func(op domain.Op) bool {
		return op.State == domain.OpPending || op.State == domain.OpRunning
	}) {
		return true
	}
	items, err := s.st.ListOutbox(ctx, id, 0, 0)
	return err != nil || slices.ContainsFunc(items, func(it domain.OutboxItem) bool { return it.State == domain.OutboxPending })
}

// checkOutbox: in the end state every acknowledged item of a surviving
// session took effect exactly once in the surviving lineage (the live
// machine of an Active session, the head snapshot of an Idle one).
func (s *sim) checkOutbox() []string {
	ctx := context.Background()
	var bad []string
	for _, id := range s.sessions {
		acked := s.acked[id]
		sess, err := s.st.GetSession(ctx, id)
		if err != nil {
			bad = append(bad, fmt.Sprintf("get session %s: %v", id, err))
			continue
		}
		effects, where, ok := s.lineage(sess)
		if !ok {
			if len(acked) > 0 && sess.State != domain.SessionCompleted && sess.State != domain.SessionDead {
				bad = append(bad, fmt.Sprintf("session %s is %s (reason %q): %s", id, sess.State, sess.Reason, where))
			}
			continue
		}
		count := map[string]int{}
		for _, e := range effects {
			count[e]++
		}
		for _, it := range acked {
			if count[it] != 1 {
				bad = append(bad, fmt.Sprintf("session %s: acknowledged item %s took effect %d times in %s (lineage %v)", id, it, count[it], where, effects))
			}
		}
	}
	return bad
}

// lineage returns the effects of a surviving session's guest state.
func (s *sim) lineage(sess domain.Session) ([]string, string, bool) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	switch sess.State {
	case domain.SessionActive:
		now := time.Now()
		for _, h := range s.w.hosts {
			if m := h.machines[string(sess.ID)]; m != nil && h.liveLocked(m, now) {
				return m.guest.Effects, fmt.Sprintf("its live machine on %s@%d", h.name, m.epoch), true
			}
		}
		return nil, fmt.Sprintf("active on %s but no host runs it live", sess.HostID), false
	case domain.SessionIdle:
		g, ok := s.w.states[string(sess.HeadSnapshotID)]
		return g.Effects, "its head snapshot " + string(sess.HeadSnapshotID), ok
	}
	return nil, "not at rest", false
}
