package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// event is one kind of random step.
type event struct {
	name   string
	weight int
	run    func(s *sim) string // what happened, for the step log; "" if nothing fit
}

var events = []event{
	{"create", 10, (*sim).create},
	{"delete", 3, (*sim).deleteNow},
	{"resume+delete", 4, (*sim).resumeThenDelete},
	{"exec", 14, (*sim).exec},
	{"suspend", 8, (*sim).suspend},
	{"snapshot", 5, (*sim).snapshot},
	{"prompt", 16, (*sim).prompt},
	{"crash", 3, (*sim).crash},
	{"agent-restart", 3, (*sim).restartAgent},
	{"vm-exit", 2, (*sim).vmExit},
	{"partition", 5, (*sim).partition},
	{"slow", 5, (*sim).slow},
	{"wait", 8, (*sim).wait},
}

func (s *sim) randomEvent() (string, string) {
	total := 0
	for _, e := range events {
		total += e.weight
	}
	for {
		n := s.rng.IntN(total)
		for _, e := range events {
			if n -= e.weight; n < 0 {
				if what := e.run(s); what != "" {
					return e.name, what
				}
				break
			}
		}
	}
}

func (s *sim) live() []domain.SessionID {
	var out []domain.SessionID
	for _, id := range s.sessions {
		if st := s.state[id]; st != domain.SessionCompleted && st != domain.SessionDead {
			out = append(out, id)
		}
	}
	return out
}

func (s *sim) create() string {
	if len(s.live()) >= maxSessions {
		return ""
	}
	spec := domain.SessionSpec{}
	if s.rng.IntN(3) == 0 {
		spec.IdleTimeoutSec = -1 // never idles out
	}
	sess, err := s.co.CreateSession(context.Background(), spec, "")
	if err != nil {
		return fmt.Sprintf("create failed: %v", err)
	}
	s.sessions = append(s.sessions, sess.ID)
	return fmt.Sprintf("create session %s (idle timeout %ds)", sess.ID, spec.IdleTimeoutSec)
}

func (s *sim) deleteNow() string {
	id, ok := pick(s.rng, s.live())
	if !ok {
		return ""
	}
	_, err := s.co.DeleteSession(context.Background(), id)
	return fmt.Sprintf("delete %s: err=%v", id, err)
}

// resumeThenDelete starts an exec (which resumes an Idle session) and
// deletes the session 20-60 ms later.
func (s *sim) resumeThenDelete() string {
	id, ok := pick(s.rng, s.live())
	if !ok {
		return ""
	}
	d := between(s.rng, 20*time.Millisecond, 60*time.Millisecond)
	s.startExec(id)
	time.Sleep(d)
	_, err := s.co.DeleteSession(context.Background(), id)
	return fmt.Sprintf("exec %s, then delete it %s later: err=%v", id, d, err)
}

func (s *sim) exec() string {
	id, ok := pick(s.rng, s.live())
	if !ok {
		return ""
	}
	s.startExec(id)
	return "exec " + string(id)
}

// startExec is a client's exec: coordinator.Guest (resuming an Idle
// session and waiting), then one request to the guest through its host.
func (s *sim) startExec(id domain.SessionID) {
	s.client(func(ctx context.Context) {
		g, err := s.co.Guest(ctx, id)
		if err != nil {
			s.logf("   exec %s: %v", id, err)
			return
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://host"+g.Route.Prefix+guestapi.PathExec, nil)
		req.Header.Set(hostlink.HeaderEpoch, fmt.Sprint(g.Session.Epoch))
		resp, err := g.Route.Transport.RoundTrip(req)
		if err != nil {
			s.logf("   exec %s on %s: %v", id, g.Session.HostID, err)
			return
		}
		resp.Body.Close()
		s.logf("   exec %s on %s@%d: %d", id, g.Session.HostID, g.Session.Epoch, resp.StatusCode)
	})
}

func (s *sim) suspend() string {
	id, ok := pick(s.rng, s.live())
	if !ok {
		return ""
	}
	_, _, err := s.co.Suspend(context.Background(), id)
	return fmt.Sprintf("suspend %s: err=%v", id, err)
}

func (s *sim) snapshot() string {
	id, ok := pick(s.rng, s.live())
	if !ok {
		return ""
	}
	s.client(func(ctx context.Context) {
		snap, err := s.co.Snapshot(ctx, id)
		s.logf("   snapshot %s: %s err=%v", id, snap.ID, err)
	})
	return "snapshot " + string(id)
}

func (s *sim) prompt() string {
	id, ok := pick(s.rng, s.live())
	if !ok {
		return ""
	}
	return s.put(id, "prompt")
}

// put sends one outbox item and remembers it if it was acknowledged.
func (s *sim) put(id domain.SessionID, prefix string) string {
	s.items++
	item := fmt.Sprintf("%s-%d", prefix, s.items)
	_, err := s.co.PutOutbox(context.Background(), id, item, "prompt", json.RawMessage(`{}`))
	if err == nil {
		s.acked[id] = append(s.acked[id], item)
	}
	return fmt.Sprintf("put %s into %s: err=%v", item, id, err)
}

func (s *sim) crash() string {
	ups := s.hostsWhere(func(h *host) bool { return h.up })
	if len(ups) < 2 {
		return ""
	}
	h, _ := pick(s.rng, ups)
	down := between(s.rng, time.Second, 25*time.Second)
	if s.opts.longCrash {
		down = between(s.rng, 8*time.Second, 25*time.Second)
	}
	back := time.Now().Add(down)
	h.crash()
	s.backs[h] = back
	return fmt.Sprintf("crash %s (restarts at %.3fs)", h.name, back.Sub(simEpoch).Seconds())
}

func (s *sim) restartAgent() string {
	h, ok := pick(s.rng, s.hostsWhere(func(h *host) bool { return h.up }))
	if !ok {
		return ""
	}
	h.restartAgent()
	return "restart the agent of " + h.name + " (its machines run on)"
}

// vmExit makes one running machine die on its own.
func (s *sim) vmExit() string {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	var cands []string
	for _, h := range s.w.hosts {
		for _, sid := range slices.Sorted(maps.Keys(h.machines)) {
			if !h.machines[sid].exited {
				cands = append(cands, string(h.id)+" "+sid)
			}
		}
	}
	c, ok := pick(s.rng, cands)
	if !ok {
		return ""
	}
	hid, sid, _ := strings.Cut(c, " ")
	s.w.byID[domain.HostID(hid)].machines[sid].exited = true
	return fmt.Sprintf("machine of %s on %s exits", sid, s.w.byID[domain.HostID(hid)].name)
}

// partition cuts a host off: briefly (a dropped link) or for longer than
// the coordinator's HostLostAfter.
func (s *sim) partition() string {
	hs := s.hostsWhere(func(h *host) bool { return h.up && !h.cut })
	h, ok := pick(s.rng, hs)
	if !ok {
		return ""
	}
	d := between(s.rng, 10*time.Millisecond, 2*time.Second)
	if s.rng.IntN(2) == 0 {
		d = between(s.rng, 3*time.Second, 25*time.Second)
	}
	h.partition()
	s.heals[h] = time.Now().Add(d)
	return fmt.Sprintf("partition %s for %s", h.name, d)
}

// slow sets how long a host's uploads and restores take.
func (s *sim) slow() string {
	h, _ := pick(s.rng, s.w.hosts)
	var chunk, fetch time.Duration
	switch s.rng.IntN(3) {
	case 1:
		chunk, fetch = between(s.rng, 10*time.Millisecond, 500*time.Millisecond), between(s.rng, 0, 200*time.Millisecond)
	case 2:
		chunk, fetch = between(s.rng, time.Second, 4*time.Second), between(s.rng, 100*time.Millisecond, 3*time.Second)
	}
	s.w.mu.Lock()
	h.chunkWait, h.fetchWait = chunk, fetch
	s.w.mu.Unlock()
	return fmt.Sprintf("host %s uploads a chunk in %s, restores in %s", h.name, chunk, fetch)
}

func (s *sim) wait() string {
	d := between(s.rng, 2*time.Second, 30*time.Second)
	s.advance(d)
	return fmt.Sprintf("waited %s", d)
}

// due heals partitions and restarts crashed hosts whose time has come.
func (s *sim) due() {
	now := time.Now()
	for _, h := range s.w.hosts {
		if at, ok := s.heals[h]; ok && !now.Before(at) {
			delete(s.heals, h)
			h.heal()
			s.logf("heal %s", h.name)
		}
		if at, ok := s.backs[h]; ok && !now.Before(at) {
			delete(s.backs, h)
			s.w.mu.Lock()
			h.bootLocked()
			s.w.mu.Unlock()
			s.logf("restart %s", h.name)
		}
	}
}

// pause lets fake time pass after a step: mostly short, sometimes long,
// with a sub-millisecond offset off the coordinator's tickers.
func (s *sim) pause() {
	var d time.Duration
	switch n := s.rng.IntN(10); {
	case n < 5:
		d = between(s.rng, 0, 300*time.Millisecond)
	case n < 9:
		d = between(s.rng, 300*time.Millisecond, 3*time.Second)
	default:
		d = between(s.rng, 3*time.Second, 10*time.Second)
	}
	s.advance(d + time.Duration(s.rng.IntN(1000))*time.Microsecond)
}

// advance sleeps d of fake time, healing and restarting hosts on time.
func (s *sim) advance(d time.Duration) {
	end := time.Now().Add(d)
	for {
		next := end
		for _, m := range []map[*host]time.Time{s.heals, s.backs} {
			for _, at := range m {
				if at.Before(next) {
					next = at
				}
			}
		}
		time.Sleep(time.Until(next))
		s.due()
		if !time.Now().Before(end) {
			return
		}
	}
}
