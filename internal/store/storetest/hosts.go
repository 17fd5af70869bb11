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
	must(t, st.CreateToken(ctx, ownerKey(tok.Hash)))
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

var hostAccessTests = []test{
	{"ClaimHostLink", testClaimHostLink},
	{"ClaimHostLinkRefusesHostsThatMayNotWork", testClaimRefusesHostsThatMayNotWork},
	{"ReleaseHostLink", testReleaseHostLink},
	{"DisableHost", testDisableHost},
	{"DeleteHost", testDeleteHost},
	{"MarkHostLost", testMarkHostLost},
	{"GetToken", testGetToken},
}

// linkedHost creates a host, registers it (ready, heartbeat at hb) and
// lets link "L1" (connected at hb) hold it.
func linkedHost(t *testing.T, st store.Store, name string, hb time.Time) domain.Host {
	t.Helper()
	h := createHost(t, st, name)
	must(t, st.RegisterHost(t.Context(), domain.Host{ID: h.ID, Name: name, LastHeartbeat: hb}))
	got, err := st.ClaimHostLink(t.Context(), store.LinkClaim{HostID: h.ID, Link: domain.HostLink{ID: "L1", Remote: "10.0.0.1:1", At: hb},
		ReplicaID: "r1", ReplicaAddr: "http://r1", StaleBefore: hb.Add(-time.Hour)})
	must(t, err)
	return got
}

func testClaimHostLink(t *testing.T, st store.Store) {
	ctx := t.Context()
	hb := t0.Add(time.Hour)
	h := linkedHost(t, st, "h1", hb)
	if h.Link.ID != "L1" || h.Link.Remote != "10.0.0.1:1" || h.ReplicaID != "r1" || h.ReplicaAddr != "http://r1" {
		t.Fatalf("after claim: %+v", h)
	}
	wantTime(t, "link_at", h.Link.At, hb)
	claim := func(link, replace string, staleBefore time.Time) (domain.Host, error) {
		return st.ClaimHostLink(ctx, store.LinkClaim{HostID: h.ID, Link: domain.HostLink{ID: link, Remote: "10.0.0.2:2", At: hb.Add(time.Minute)},
			ReplicaID: "r2", ReplicaAddr: "http://r2", StaleBefore: staleBefore, Replace: replace})
	}
	tests := []struct {
		name        string
		link        string
		replace     string
		staleBefore time.Time
		wantHolder  string // after the call
	}{
		{"a second link while the first is fresh", "L2", "", hb, "L1"},
		{"replacing a link that is not the holder", "L2", "L9", hb, "L1"},
		{"the holder claims again", "L1", "", hb, "L1"},
		{"the holder is known gone", "L2", "L1", hb, "L2"},
		{"a holder that connected after the cutoff, though its host last heartbeated before", "L3", "", hb.Add(30 * time.Second), "L2"},
		{"a link older than the stale cutoff", "L3", "", hb.Add(2 * time.Minute), "L3"},
	}
	for _, tt := range tests {
		got, err := claim(tt.link, tt.replace, tt.staleBefore)
		if tt.wantHolder != tt.link {
			wantErr(t, err, store.ErrConflict)
		} else {
			must(t, err)
		}
		if got.Link.ID != tt.wantHolder {
			t.Fatalf("%s: holder %q, want %q (%v)", tt.name, got.Link.ID, tt.wantHolder, err)
		}
	}
	// A fresh heartbeat keeps a link that connected long ago.
	_, err := st.HostHeartbeat(ctx, h.ID, nil, hb.Add(time.Hour))
	must(t, err)
	_, err = claim("L4", "", hb.Add(30*time.Minute))
	wantErr(t, err, store.ErrConflict)
	_, err = st.ClaimHostLink(ctx, store.LinkClaim{HostID: newHID(), Link: domain.HostLink{ID: "L1", At: hb}})
	wantErr(t, err, store.ErrNotFound)
	if _, err := st.ClaimHostLink(ctx, store.LinkClaim{HostID: h.ID, Link: domain.HostLink{ID: "L1"}}); err == nil {
		t.Fatal("a claim without a time succeeded")
	}
}

func testClaimRefusesHostsThatMayNotWork(t *testing.T, st store.Store) {
	ctx := t.Context()
	tests := []struct {
		name string
		make func(t *testing.T, h domain.Host)
	}{
		{"disabled", func(t *testing.T, h domain.Host) { _, err := st.DisableHost(ctx, h.ID, true); must(t, err) }},
		{"deleted", func(t *testing.T, h domain.Host) { _, err := st.DeleteHost(ctx, h.ID, t0); must(t, err) }},
		{"token revoked", func(t *testing.T, h domain.Host) {
			toks, err := st.ListTokens(ctx, store.TokenFilter{})
			must(t, err)
			for _, tok := range toks {
				if tok.HostID == h.ID {
					must(t, st.RevokeToken(ctx, tok.ID, t0))
				}
			}
		}},
	}
	for _, tt := range tests {
		h := createHost(t, st, "h-"+tt.name[:3])
		tt.make(t, h)
		got, err := st.ClaimHostLink(ctx, store.LinkClaim{HostID: h.ID, Link: domain.HostLink{ID: "L1", At: t0}})
		wantErr(t, err, store.ErrConflict)
		if got.ID != h.ID || got.Link.ID != "" {
			t.Fatalf("%s: refused claim returned %+v, want the row without a link", tt.name, got)
		}
		if err := st.RegisterHost(ctx, domain.Host{ID: h.ID, Name: h.Name, LastHeartbeat: t0}); err == nil {
			t.Fatalf("%s: RegisterHost succeeded", tt.name)
		}
	}
}

func testReleaseHostLink(t *testing.T, st store.Store) {
	ctx := t.Context()
	hb := t0.Add(time.Hour)
	h := linkedHost(t, st, "h1", hb)
	must(t, st.ReleaseHostLink(ctx, h.ID, "L2")) // not the holder: nothing changes
	got, err := st.GetHost(ctx, h.ID)
	must(t, err)
	if got.Link.ID != "L1" {
		t.Fatalf("a release by another link ended the hold: %+v", got.Link)
	}
	must(t, st.ReleaseHostLink(ctx, h.ID, "L1"))
	got, err = st.GetHost(ctx, h.ID)
	must(t, err)
	if got.Link.ID != "" || got.Link.Remote != "10.0.0.1:1" || got.State != domain.HostReady {
		t.Fatalf("after release: link %+v state %s, want no holder, the last remote kept, still ready", got.Link, got.State)
	}
	_, err = st.ClaimHostLink(ctx, store.LinkClaim{HostID: h.ID, Link: domain.HostLink{ID: "L2", At: hb}, StaleBefore: t0})
	must(t, err)
	if err := st.ReleaseHostLink(ctx, h.ID, ""); err == nil {
		t.Fatal("a release without a link id succeeded")
	}
}

func testDisableHost(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := linkedHost(t, st, "h1", t0)
	got, err := st.DisableHost(ctx, h.ID, true)
	must(t, err)
	if !got.Disabled || got.State != domain.HostLost || got.Link.ID != "" || got.Enabled() {
		t.Fatalf("disabled host: %+v, want disabled, lost, no link", got)
	}
	if state, err := st.ReviveHost(ctx, h.ID); err != nil || state != domain.HostLost {
		t.Fatalf("ReviveHost of a disabled host = %s, %v; want it to stay lost", state, err)
	}
	wantErr(t, st.RegisterHost(ctx, domain.Host{ID: h.ID, Name: "h1", LastHeartbeat: t0}), store.ErrConflict)
	got, err = st.DisableHost(ctx, h.ID, false)
	must(t, err)
	if got.Disabled || got.State != domain.HostLost {
		t.Fatalf("enabled host: %+v, want enabled and still lost until it registers", got)
	}
	if state, err := st.ReviveHost(ctx, h.ID); err != nil || state != domain.HostReady {
		t.Fatalf("ReviveHost of an enabled host = %s, %v", state, err)
	}
	// A new host keeps its state when disabled.
	fresh := createHost(t, st, "h2")
	got, err = st.DisableHost(ctx, fresh.ID, true)
	must(t, err)
	if got.State != domain.HostNew {
		t.Fatalf("disabled new host is %s", got.State)
	}
	_, err = st.DisableHost(ctx, newHID(), true)
	wantErr(t, err, store.ErrNotFound)
}

func testDeleteHost(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := createHost(t, st, "h1")
	must(t, st.RegisterHost(ctx, domain.Host{ID: h.ID, Name: "h1", LastHeartbeat: t0}))
	toks, err := st.ListTokens(ctx, store.TokenFilter{})
	must(t, err)
	at := t0.Add(time.Hour)
	got, err := st.DeleteHost(ctx, h.ID, at)
	must(t, err)
	wantTime(t, "deleted_at", got.DeletedAt, at)
	if got.State != domain.HostLost || got.Enabled() {
		t.Fatalf("deleted host: %+v", got)
	}
	for _, tok := range toks {
		gt, err := st.GetToken(ctx, tok.ID)
		must(t, err)
		wantTime(t, "revoked_at of "+tok.ID, gt.RevokedAt, at)
		_, err = st.TokenByHash(ctx, tok.Hash)
		wantErr(t, err, store.ErrNotFound)
	}
	_, err = st.DeleteHost(ctx, h.ID, at)
	wantErr(t, err, store.ErrNotFound)
	_, err = st.DisableHost(ctx, h.ID, false)
	wantErr(t, err, store.ErrNotFound)
	// The row stays, the name is free again.
	if kept, err := st.GetHost(ctx, h.ID); err != nil || kept.DeletedAt.IsZero() {
		t.Fatalf("deleted host row: %+v %v", kept, err)
	}
	again := createHost(t, st, "h1")
	if again.ID == h.ID {
		t.Fatal("same id")
	}
	_, err = st.DeleteHost(ctx, newHID(), at)
	wantErr(t, err, store.ErrNotFound)
}

func testMarkHostLost(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := linkedHost(t, st, "h1", t0)
	got, err := st.MarkHostLost(ctx, h.ID)
	must(t, err)
	if got.State != domain.HostLost || got.Link.ID != "" {
		t.Fatalf("after MarkHostLost: %+v", got)
	}
	// With its only token revoked it stays lost; a new token lets it back.
	toks, err := st.ListTokens(ctx, store.TokenFilter{})
	must(t, err)
	must(t, st.RevokeToken(ctx, toks[0].ID, t0))
	if state, err := st.ReviveHost(ctx, h.ID); err != nil || state != domain.HostLost {
		t.Fatalf("ReviveHost with every token revoked = %s, %v", state, err)
	}
	must(t, st.CreateToken(ctx, hostToken(h.ID)))
	if state, err := st.ReviveHost(ctx, h.ID); err != nil || state != domain.HostReady {
		t.Fatalf("ReviveHost with a live token = %s, %v", state, err)
	}
	fresh := createHost(t, st, "h2")
	if got, err := st.MarkHostLost(ctx, fresh.ID); err != nil || got.State != domain.HostNew {
		t.Fatalf("MarkHostLost of a new host: %+v %v", got, err)
	}
	_, err = st.MarkHostLost(ctx, newHID())
	wantErr(t, err, store.ErrNotFound)
}

func testGetToken(t *testing.T, st store.Store) {
	ctx := t.Context()
	tok := ownerKey(newID())
	tok.Name, tok.CreatedAt = "u", t0
	must(t, st.CreateToken(ctx, tok))
	must(t, st.RevokeToken(ctx, tok.ID, t0.Add(time.Minute)))
	got, err := st.GetToken(ctx, tok.ID)
	must(t, err)
	if got.ID != tok.ID || got.Kind != domain.TokenUser {
		t.Fatalf("GetToken = %+v", got)
	}
	wantTime(t, "revoked_at", got.RevokedAt, t0.Add(time.Minute))
	_, err = st.GetToken(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
}
