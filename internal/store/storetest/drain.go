package storetest

import (
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var drainTests = []test{
	{"HostDrainFlag", testHostDrainFlag},
	{"ReviveHost", testReviveHost},
}

// testHostDrainFlag walks one host through admin drains, reconnects and loss:
// the flag is admin intent and survives all of them, and a connected host's
// state follows it.
func testHostDrainFlag(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := createHost(t, st, "h1")
	if h.Draining {
		t.Fatal("a new host is draining")
	}
	hb := t0
	register := func() error {
		hb = hb.Add(time.Second)
		return st.RegisterHost(ctx, domain.Host{ID: h.ID, Name: h.Name, LastHeartbeat: hb})
	}
	revive := func() error {
		state, err := st.ReviveHost(ctx, h.ID)
		got, gerr := st.GetHost(ctx, h.ID)
		must(t, gerr)
		if err == nil && state != got.State {
			t.Fatalf("ReviveHost returned %s, host is %s", state, got.State)
		}
		return err
	}
	lose := func() error {
		ids, err := st.MarkHostsLost(ctx, hb.Add(time.Second))
		if err == nil && (len(ids) != 1 || ids[0] != h.ID) {
			t.Fatalf("MarkHostsLost = %v, want [%s]", ids, h.ID)
		}
		return err
	}
	drain := func(on bool) func() error { return func() error { return st.SetHostDraining(ctx, h.ID, on) } }
	steps := []struct {
		name     string
		do       func() error
		state    domain.HostState
		draining bool
	}{
		{"drain a new host", drain(true), domain.HostNew, true},
		{"register while draining", register, domain.HostDraining, true},
		{"undrain", drain(false), domain.HostReady, false},
		{"drain a ready host", drain(true), domain.HostDraining, true},
		{"drain again", drain(true), domain.HostDraining, true},
		{"lose it", lose, domain.HostLost, true},
		{"revive", revive, domain.HostDraining, true},
		{"lose it again", lose, domain.HostLost, true},
		{"reconnect", register, domain.HostDraining, true},
		{"lose it a third time", lose, domain.HostLost, true},
		{"undrain while lost", drain(false), domain.HostLost, false},
		{"revive undrained", revive, domain.HostReady, false},
		{"force a state", func() error { return st.SetHostState(ctx, h.ID, domain.HostDraining) }, domain.HostDraining, false},
		{"reconnect undrained", register, domain.HostReady, false},
	}
	for _, s := range steps {
		must(t, s.do())
		got, err := st.GetHost(ctx, h.ID)
		must(t, err)
		if got.State != s.state || got.Draining != s.draining {
			t.Fatalf("after %s: state %s draining %v, want %s %v", s.name, got.State, got.Draining, s.state, s.draining)
		}
	}
	hosts, err := st.ListHosts(ctx)
	must(t, err)
	if len(hosts) != 1 || hosts[0].Draining {
		t.Fatalf("ListHosts = %+v", hosts)
	}
	wantErr(t, st.SetHostDraining(ctx, newHID(), true), store.ErrNotFound)
}

func testReviveHost(t *testing.T, st store.Store) {
	ctx := t.Context()
	for _, state := range []domain.HostState{domain.HostNew, domain.HostReady, domain.HostDraining} {
		h := createHost(t, st, string(state))
		must(t, st.SetHostState(ctx, h.ID, state))
		got, err := st.ReviveHost(ctx, h.ID)
		must(t, err)
		if got != state {
			t.Fatalf("ReviveHost of a %s host = %s, want it left %s", state, got, state)
		}
		after, err := st.GetHost(ctx, h.ID)
		must(t, err)
		if after.State != state {
			t.Fatalf("host state after ReviveHost = %s, want %s", after.State, state)
		}
	}
	_, err := st.ReviveHost(ctx, newHID())
	wantErr(t, err, store.ErrNotFound)
}
