package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var hostTests = []test{
	{"CreateHost", testCreateHost},
	{"CreateHostConflict", testCreateHostConflict},
	{"RegisterHost", testRegisterHost},
	{"HostHeartbeat", testHostHeartbeat},
	{"SetHostState", testSetHostState},
	{"MarkHostsLost", testMarkHostsLost},
	{"HostNotFound", testHostNotFound},
}

func hostToken(hostID domain.HostID) domain.Token {
	return domain.Token{ID: newID(), Name: "host", Kind: domain.TokenHost, HostID: hostID, Prefix: "eh_", Hash: newID(), CreatedAt: t0}
}

func createHost(t *testing.T, st store.Store, name string) domain.Host {
	t.Helper()
	h := domain.Host{ID: newHID(), Name: name, CreatedAt: t0}
	must(t, st.CreateHost(t.Context(), h, hostToken(h.ID)))
	got, err := st.GetHost(t.Context(), h.ID)
	must(t, err)
	return got
}

func testCreateHost(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := domain.Host{ID: newHID(), Name: "h1", State: domain.HostReady, Facts: domain.HostFacts{CPUModel: "x"}, CreatedAt: t0}
	tok := hostToken(h.ID)
	must(t, st.CreateHost(ctx, h, tok))
	got, err := st.GetHost(ctx, h.ID)
	must(t, err)
	if got.Name != "h1" || got.State != domain.HostNew {
		t.Fatalf("host = %+v, want name h1 in state new", got)
	}
	wantSame(t, "facts", got.Facts, h.Facts)
	wantTime(t, "created_at", got.CreatedAt, t0)
	wantTime(t, "last_heartbeat", got.LastHeartbeat, time.Time{})
	gotTok, err := st.TokenByHash(ctx, tok.Hash)
	must(t, err)
	if gotTok.ID != tok.ID || gotTok.Kind != domain.TokenHost || gotTok.HostID != h.ID {
		t.Fatalf("token = %+v, want host token %s for %s", gotTok, tok.ID, h.ID)
	}
	list, err := st.ListHosts(ctx)
	must(t, err)
	if len(list) != 1 || list[0].ID != h.ID {
		t.Fatalf("ListHosts = %+v, want [%s]", list, h.ID)
	}
}

func testCreateHostConflict(t *testing.T, st store.Store) {
	ctx := t.Context()
	first := createHost(t, st, "same")
	dup := domain.Host{ID: newHID(), Name: "same"}
	tok := hostToken(dup.ID)
	wantErr(t, st.CreateHost(ctx, dup, tok), store.ErrConflict)
	// Nothing of the failed call remains: no host, no token.
	_, err := st.GetHost(ctx, dup.ID)
	wantErr(t, err, store.ErrNotFound)
	_, err = st.TokenByHash(ctx, tok.Hash)
	wantErr(t, err, store.ErrNotFound)
	// A reused token hash conflicts too, and leaves no host behind.
	other := domain.Host{ID: newHID(), Name: "other"}
	reused := hostToken(other.ID)
	reused.Hash = tok.Hash
	must(t, st.CreateToken(ctx, domain.Token{ID: newID(), Kind: domain.TokenUser, Hash: tok.Hash}))
	wantErr(t, st.CreateHost(ctx, other, reused), store.ErrConflict)
	hosts, err := st.ListHosts(ctx)
	must(t, err)
	if len(hosts) != 1 || hosts[0].ID != first.ID {
		t.Fatalf("hosts = %+v, want only %s", hosts, first.ID)
	}
	if err := st.CreateHost(ctx, domain.Host{ID: newHID()}, hostToken("x")); err == nil {
		t.Fatal("CreateHost without a name succeeded")
	}
}

func testRegisterHost(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := createHost(t, st, "h1")
	reg := domain.Host{
		ID: h.ID, Name: "h1-renamed", Facts: domain.HostFacts{Kernel: "6.1"}, Capacity: domain.Capacity{VCPUs: 8},
		ReplicaID: "r1", ReplicaAddr: "10.0.0.1:7000", ProtocolVersion: 3, LastHeartbeat: t0.Add(time.Minute),
	}
	must(t, st.RegisterHost(ctx, reg))
	got, err := st.GetHost(ctx, h.ID)
	must(t, err)
	if got.Name != reg.Name || got.State != domain.HostReady || got.ReplicaID != "r1" ||
		got.ReplicaAddr != reg.ReplicaAddr || got.ProtocolVersion != 3 {
		t.Fatalf("registered host = %+v", got)
	}
	wantSame(t, "facts", got.Facts, reg.Facts)
	wantSame(t, "capacity", got.Capacity, reg.Capacity)
	wantTime(t, "last_heartbeat", got.LastHeartbeat, reg.LastHeartbeat)
	wantTime(t, "connected_at", got.ConnectedAt, reg.LastHeartbeat)
	wantTime(t, "created_at", got.CreatedAt, t0)

	// A host never created is inserted; a lost one comes back ready.
	fresh := domain.Host{ID: newHID(), Name: "fresh", LastHeartbeat: t0}
	must(t, st.RegisterHost(ctx, fresh))
	must(t, st.SetHostState(ctx, fresh.ID, domain.HostLost))
	must(t, st.RegisterHost(ctx, fresh))
	got, err = st.GetHost(ctx, fresh.ID)
	must(t, err)
	if got.State != domain.HostReady || got.Name != "fresh" {
		t.Fatalf("re-registered host = %+v", got)
	}
	wantTime(t, "created_at", got.CreatedAt, t0)
	// Taking another host's name conflicts.
	fresh.Name = reg.Name
	wantErr(t, st.RegisterHost(ctx, fresh), store.ErrConflict)
}

func testHostHeartbeat(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := createHost(t, st, "h1")
	must(t, st.RegisterHost(ctx, domain.Host{ID: h.ID, Name: h.Name, Capacity: domain.Capacity{MemoryMiB: 1}, LastHeartbeat: t0}))
	at := t0.Add(10 * time.Second)
	state, err := st.HostHeartbeat(ctx, h.ID, &domain.Capacity{MemoryMiB: 2}, at)
	must(t, err)
	if state != domain.HostReady {
		t.Fatalf("state = %s, want ready", state)
	}
	got, err := st.GetHost(ctx, h.ID)
	must(t, err)
	wantTime(t, "last_heartbeat", got.LastHeartbeat, at)
	wantSame(t, "capacity", got.Capacity, domain.Capacity{MemoryMiB: 2})
	wantTime(t, "connected_at", got.ConnectedAt, t0)

	must(t, st.SetHostState(ctx, h.ID, domain.HostLost))
	state, err = st.HostHeartbeat(ctx, h.ID, nil, at.Add(time.Second))
	must(t, err)
	if state != domain.HostLost {
		t.Fatalf("state of a lost host = %s, want lost", state)
	}
	got, err = st.GetHost(ctx, h.ID)
	must(t, err)
	wantSame(t, "capacity after nil", got.Capacity, domain.Capacity{MemoryMiB: 2})
	_, err = st.HostHeartbeat(ctx, newHID(), nil, at)
	wantErr(t, err, store.ErrNotFound)
}

func testSetHostState(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := createHost(t, st, "h1")
	for _, s := range []domain.HostState{domain.HostReady, domain.HostDraining, domain.HostLost, domain.HostNew} {
		must(t, st.SetHostState(ctx, h.ID, s))
		got, err := st.GetHost(ctx, h.ID)
		must(t, err)
		if got.State != s {
			t.Fatalf("state = %s, want %s", got.State, s)
		}
	}
	if err := st.SetHostState(ctx, h.ID, "bogus"); err == nil {
		t.Fatal("SetHostState(bogus) succeeded")
	}
	wantErr(t, st.SetHostState(ctx, newHID(), domain.HostReady), store.ErrNotFound)
}

func testMarkHostsLost(t *testing.T, st store.Store) {
	ctx := t.Context()
	cutoff := t0
	hosts := []struct {
		name      string
		heartbeat time.Time
		state     domain.HostState
		lost      bool
	}{
		{"old-ready", cutoff.Add(-time.Minute), domain.HostReady, true},
		{"old-draining", cutoff.Add(-time.Microsecond), domain.HostDraining, true},
		{"at-cutoff", cutoff, domain.HostReady, false},
		{"fresh", cutoff.Add(time.Second), domain.HostReady, false},
		{"old-new", cutoff.Add(-time.Hour), domain.HostNew, false},
		{"already-lost", cutoff.Add(-time.Hour), domain.HostLost, false},
	}
	var want []domain.HostID
	for _, h := range hosts {
		id := newHID()
		must(t, st.RegisterHost(ctx, domain.Host{ID: id, Name: h.name, LastHeartbeat: h.heartbeat}))
		must(t, st.SetHostState(ctx, id, h.state))
		if h.lost {
			want = append(want, id)
		}
	}
	slices.Sort(want)
	got, err := st.MarkHostsLost(ctx, cutoff)
	must(t, err)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("MarkHostsLost = %v, want %v", got, want)
	}
	for _, id := range want {
		h, err := st.GetHost(ctx, id)
		must(t, err)
		if h.State != domain.HostLost {
			t.Fatalf("host %s state = %s, want lost", h.Name, h.State)
		}
	}
	got, err = st.MarkHostsLost(ctx, cutoff)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("second MarkHostsLost = %v, want none", got)
	}
}

func testHostNotFound(t *testing.T, st store.Store) {
	_, err := st.GetHost(t.Context(), newHID())
	wantErr(t, err, store.ErrNotFound)
	hosts, err := st.ListHosts(t.Context())
	must(t, err)
	if len(hosts) != 0 {
		t.Fatalf("ListHosts on an empty store = %v", hosts)
	}
}
