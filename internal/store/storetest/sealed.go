package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var sealedTests = []test{
	{"SealedList", testSealedList},
	{"SealedReplace", testSealedReplace},
	{"SealedReplaceConcurrent", func(t *testing.T, st store.Store) { ReplaceSealedConcurrently(t, []store.Store{st}, 4, 6) }},
}

func testSealedList(t *testing.T, st store.Store) {
	ctx := t.Context()
	var secrets []domain.Secret
	for i := range 5 {
		s := newSecret("generic", fmt.Sprintf("s%d", i))
		s.Sealed = []byte{0x01, byte(i), 0x00, 0xff}
		must(t, st.PutSecret(ctx, s))
		secrets = append(secrets, s)
	}
	gw := newSecret("gateway_key", "engrams-gateway-key")
	must(t, st.PutSecret(ctx, gw))
	must(t, st.DeleteSecret(ctx, secrets[2].ID, t0))
	cred := domain.RegistryCredential{ID: newID(), Registry: "ghcr.io", Sealed: []byte{0x01, 0x00, 'c'}}
	must(t, st.PutCredential(ctx, cred))

	// Paged by id, two at a time: every live sealed secret once, the
	// deleted one (nothing sealed) never.
	want := map[string][]byte{gw.ID: gw.Sealed}
	for i, s := range secrets {
		if i != 2 {
			want[s.ID] = s.Sealed
		}
	}
	got := map[string][]byte{}
	after, pages := "", 0
	for {
		page, err := st.ListSealed(ctx, domain.SealedSecret, after, 2)
		must(t, err)
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("a page of %d rows, limit 2", len(page))
		}
		for _, v := range page {
			if v.Kind != domain.SealedSecret || v.ID <= after {
				t.Fatalf("row %+v after %q: out of order or of another kind", v, after)
			}
			if _, dup := got[v.ID]; dup {
				t.Fatalf("row %s listed twice", v.ID)
			}
			got[v.ID], after = v.Sealed, v.ID
		}
		pages++
	}
	if len(got) != len(want) || pages != 3 {
		t.Fatalf("listed %d secrets in %d pages, want %d in 3", len(got), pages, len(want))
	}
	for id, sealed := range want {
		if !bytes.Equal(got[id], sealed) {
			t.Fatalf("secret %s sealed = %x, want %x", id, got[id], sealed)
		}
	}
	creds, err := st.ListSealed(ctx, domain.SealedRegistryCredential, "", 0)
	must(t, err)
	if len(creds) != 1 || creds[0].ID != cred.ID || !bytes.Equal(creds[0].Sealed, cred.Sealed) || creds[0].Kind != domain.SealedRegistryCredential {
		t.Fatalf("registry credentials = %+v, want %+v", creds, cred)
	}
	for _, k := range domain.SealedKinds() {
		if _, err := st.ListSealed(ctx, k, "", 1); err != nil {
			t.Errorf("kind %s: %v: the store must list every sealed kind", k, err)
		}
	}
	if _, err := st.ListSealed(ctx, "tokens", "", 10); err == nil {
		t.Fatal("ListSealed of an unknown kind succeeded")
	}
}

func testSealedReplace(t *testing.T, st store.Store) {
	ctx := t.Context()
	s := newSecret("generic", "live")
	must(t, st.PutSecret(ctx, s))
	gone := newSecret("generic", "gone")
	must(t, st.PutSecret(ctx, gone))
	must(t, st.DeleteSecret(ctx, gone.ID, t0))
	cred := domain.RegistryCredential{ID: newID(), Registry: "ghcr.io", Sealed: []byte("c1")}
	must(t, st.PutCredential(ctx, cred))

	resealed := []byte{0x01, 0x00, 0xff, 'n', 'e', 'w'}
	must(t, st.ReplaceSealed(ctx, domain.SealedSecret, s.ID, s.Sealed, resealed))
	got, err := st.GetSecret(ctx, s.ID)
	must(t, err)
	if !bytes.Equal(got.Sealed, resealed) || got.Name != s.Name || got.Kind != s.Kind {
		t.Fatalf("after replace: %+v", got)
	}
	// The old value no longer matches: nothing is written.
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedSecret, s.ID, s.Sealed, []byte("stale")), store.ErrConflict)
	if got, _ := st.GetSecret(ctx, s.ID); !bytes.Equal(got.Sealed, resealed) {
		t.Fatalf("a stale replace wrote %q", got.Sealed)
	}
	// A deleted secret is never given its value back.
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedSecret, gone.ID, gone.Sealed, []byte("back")), store.ErrConflict)
	if got, _ := st.GetSecret(ctx, gone.ID); got.Sealed != nil || got.DeletedAt.IsZero() {
		t.Fatalf("a deleted secret after replace: %+v", got)
	}
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedSecret, newID(), []byte("a"), []byte("b")), store.ErrNotFound)
	// Kinds are tables of their own.
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedRegistryCredential, s.ID, resealed, []byte("x")), store.ErrNotFound)
	must(t, st.ReplaceSealed(ctx, domain.SealedRegistryCredential, cred.ID, cred.Sealed, []byte("c2")))
	if got, _ := st.GetCredential(ctx, cred.ID); string(got.Sealed) != "c2" || got.Registry != "ghcr.io" {
		t.Fatalf("credential after replace: %+v", got)
	}
	for _, bad := range [][2][]byte{{nil, []byte("x")}, {[]byte("c2"), nil}} {
		if err := st.ReplaceSealed(ctx, domain.SealedRegistryCredential, cred.ID, bad[0], bad[1]); err == nil {
			t.Fatalf("ReplaceSealed(%q, %q) succeeded", bad[0], bad[1])
		}
	}
	if err := st.ReplaceSealed(ctx, "tokens", s.ID, resealed, []byte("x")); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplaceSealed of an unknown kind: %v", err)
	}
}

// ReplaceSealedConcurrently has workers (spread over stores sharing one
// database) each re-seal every one of a few secrets from the value they
// read: of the writers of one value exactly one wins, the others get
// ErrConflict.
func ReplaceSealedConcurrently(t *testing.T, stores []store.Store, workers, rows int) {
	t.Helper()
	ctx := t.Context()
	ids := make([]string, rows)
	for i := range ids {
		s := newSecret("generic", fmt.Sprintf("contended-%d", i))
		must(t, stores[0].PutSecret(ctx, s))
		ids[i] = s.ID
	}
	var mu sync.Mutex
	wins := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		st := stores[w%len(stores)]
		wg.Go(func() {
			<-start
			for _, id := range ids {
				cur, err := st.GetSecret(ctx, id)
				if err != nil {
					t.Error(err)
					return
				}
				if bytes.Contains(cur.Sealed, []byte("/by-")) {
					continue // another worker re-sealed it before this one read it
				}
				err = st.ReplaceSealed(ctx, domain.SealedSecret, id, cur.Sealed, fmt.Appendf(nil, "%s/by-%d", cur.Sealed, w))
				mu.Lock()
				switch {
				case err == nil:
					wins[id]++
				case !errors.Is(err, store.ErrConflict):
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	for _, id := range ids {
		got, err := stores[len(stores)-1].GetSecret(ctx, id)
		must(t, err)
		if wins[id] != 1 || !bytes.HasPrefix(got.Sealed, []byte("sealed:")) || !bytes.Contains(got.Sealed, []byte("/by-")) {
			t.Errorf("secret %s: %d winning re-seals (want 1), sealed %q", id, wins[id], got.Sealed)
		}
	}
}
