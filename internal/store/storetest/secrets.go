package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var secretTests = []test{
	{"SecretRoundTrip", testSecretRoundTrip},
	{"SecretDelete", testSecretDelete},
	{"SecretRejected", testSecretRejected},
}

func newSecret(kind, name string) domain.Secret {
	return domain.Secret{
		ID: newSecretID(), Org: domain.FirstOrg, Kind: kind, Name: name, Sealed: []byte("sealed:" + name),
		Meta: json.RawMessage(`{"base_url":"https://api.example/v1"}`), CreatedAt: t0,
	}
}

func wantSecret(t *testing.T, got, want domain.Secret) {
	t.Helper()
	if got.ID != want.ID || got.Kind != want.Kind || got.Name != want.Name || !bytes.Equal(got.Sealed, want.Sealed) {
		t.Fatalf("secret = %+v, want %+v", got, want)
	}
	if (got.Sealed == nil) != (want.Sealed == nil) {
		t.Fatalf("sealed = %#v, want %#v", got.Sealed, want.Sealed)
	}
	wantJSON(t, "meta", got.Meta, want.Meta)
	wantTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	wantTime(t, "deleted_at", got.DeletedAt, want.DeletedAt)
}

func testSecretRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	anthropic := newSecret("anthropic_api_key", "anthropic")
	// Bytes that text columns or encodings would mangle.
	anthropic.Sealed = []byte{0x01, 0x00, 0xff, 0xfe, '\'', '"', '\\', 0x80, 0x00, 'x', 0xc3, 0x28}
	must(t, st.PutSecret(ctx, anthropic))
	git := newSecret("git_https", "github")
	git.Meta = json.RawMessage(`{"host":"github.com","username":"bot"}`)
	must(t, st.PutSecret(ctx, git))
	bare := newSecret("openai_api_key", "openai")
	bare.Meta, bare.CreatedAt = nil, time.Time{}
	must(t, st.PutSecret(ctx, bare))

	got, err := st.GetSecret(ctx, anthropic.ID)
	must(t, err)
	wantSecret(t, got, anthropic)
	got, err = st.GetSecretByName(ctx, domain.FirstOrg, "github")
	must(t, err)
	wantSecret(t, got, git)
	got, err = st.GetSecret(ctx, bare.ID)
	must(t, err)
	if got.Meta != nil || got.CreatedAt.IsZero() {
		t.Fatalf("secret put without meta or time = %+v, want no meta and a creation time", got)
	}
	bare.CreatedAt = got.CreatedAt

	list, err := st.ListSecrets(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 3 {
		t.Fatalf("listed %d secrets, want 3", len(list))
	}
	for i, want := range []domain.Secret{anthropic, git, bare} { // by name
		wantSecret(t, list[i], want)
	}
	_, err = st.GetSecret(ctx, newSecretID())
	wantErr(t, err, store.ErrNotFound)
	_, err = st.GetSecretByName(ctx, domain.FirstOrg, "nope")
	wantErr(t, err, store.ErrNotFound)
}

func testSecretDelete(t *testing.T, st store.Store) {
	ctx := t.Context()
	old := newSecret("anthropic_api_key", "anthropic")
	must(t, st.PutSecret(ctx, old))
	other := newSecret("git_https", "github")
	must(t, st.PutSecret(ctx, other))
	wantErr(t, st.PutSecret(ctx, newSecret("openai_api_key", "anthropic")), store.ErrConflict)

	deletedAt := t0.Add(time.Minute)
	must(t, st.DeleteSecret(ctx, old.ID, deletedAt))
	// The row stays as a record, without its sealed bytes; the name is free.
	got, err := st.GetSecret(ctx, old.ID)
	must(t, err)
	old.Sealed, old.DeletedAt = nil, deletedAt
	wantSecret(t, got, old)
	_, err = st.GetSecretByName(ctx, domain.FirstOrg, "anthropic")
	wantErr(t, err, store.ErrNotFound)
	list, err := st.ListSecrets(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 1 || list[0].ID != other.ID {
		t.Fatalf("live secrets after delete = %+v, want only %s", list, other.ID)
	}

	// Deleting again changes nothing; an unknown id is not found.
	must(t, st.DeleteSecret(ctx, old.ID, deletedAt.Add(time.Hour)))
	got, err = st.GetSecret(ctx, old.ID)
	must(t, err)
	wantSecret(t, got, old)
	wantErr(t, st.DeleteSecret(ctx, newSecretID(), t0), store.ErrNotFound)

	// The name is taken by a new secret; the deleted one's id stays taken.
	fresh := newSecret("anthropic_api_key", "anthropic")
	must(t, st.PutSecret(ctx, fresh))
	got, err = st.GetSecretByName(ctx, domain.FirstOrg, "anthropic")
	must(t, err)
	wantSecret(t, got, fresh)
	reused := newSecret("anthropic_api_key", "elsewhere")
	reused.ID = old.ID
	wantErr(t, st.PutSecret(ctx, reused), store.ErrConflict)
}

func testSecretRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	s := newSecret("anthropic_api_key", "anthropic")
	must(t, st.PutSecret(ctx, s))
	sameID := newSecret("git_https", "github")
	sameID.ID = s.ID
	badMeta := newSecret("git_https", "github")
	badMeta.Meta = json.RawMessage(`{"host":`)
	cases := []struct {
		name string
		s    domain.Secret
		want error // nil: any error
	}{
		{"same id", sameID, store.ErrConflict},
		{"same live name", newSecret("openai_api_key", "anthropic"), store.ErrConflict},
		{"no id", domain.Secret{Kind: "git_https", Name: "a", Sealed: []byte("x")}, nil},
		{"no kind", domain.Secret{ID: newSecretID(), Name: "a", Sealed: []byte("x")}, nil},
		{"no name", domain.Secret{ID: newSecretID(), Kind: "git_https", Sealed: []byte("x")}, nil},
		{"nothing sealed", domain.Secret{ID: newSecretID(), Kind: "git_https", Name: "a", Sealed: []byte{}}, nil},
		{"bad meta", badMeta, nil},
	}
	for _, c := range cases {
		err := st.PutSecret(ctx, c.s)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: PutSecret error = %v, want %v", c.name, err, c.want)
		}
	}
	list, err := st.ListSecrets(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("listed %d secrets after refused puts, want 1: %+v", len(list), list)
	}
	wantSecret(t, list[0], s)
}

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
	want := map[string][]byte{string(gw.ID): gw.Sealed}
	for i, s := range secrets {
		if i != 2 {
			want[string(s.ID)] = s.Sealed
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
	must(t, st.ReplaceSealed(ctx, domain.SealedSecret, string(s.ID), s.Sealed, resealed))
	got, err := st.GetSecret(ctx, s.ID)
	must(t, err)
	if !bytes.Equal(got.Sealed, resealed) || got.Name != s.Name || got.Kind != s.Kind {
		t.Fatalf("after replace: %+v", got)
	}
	// The old value no longer matches: nothing is written.
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedSecret, string(s.ID), s.Sealed, []byte("stale")), store.ErrConflict)
	if got, _ := st.GetSecret(ctx, s.ID); !bytes.Equal(got.Sealed, resealed) {
		t.Fatalf("a stale replace wrote %q", got.Sealed)
	}
	// A deleted secret is never given its value back.
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedSecret, string(gone.ID), gone.Sealed, []byte("back")), store.ErrConflict)
	if got, _ := st.GetSecret(ctx, gone.ID); got.Sealed != nil || got.DeletedAt.IsZero() {
		t.Fatalf("a deleted secret after replace: %+v", got)
	}
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedSecret, newID(), []byte("a"), []byte("b")), store.ErrNotFound)
	// Kinds are tables of their own.
	wantErr(t, st.ReplaceSealed(ctx, domain.SealedRegistryCredential, string(s.ID), resealed, []byte("x")), store.ErrNotFound)
	must(t, st.ReplaceSealed(ctx, domain.SealedRegistryCredential, cred.ID, cred.Sealed, []byte("c2")))
	if got, _ := st.GetCredential(ctx, cred.ID); string(got.Sealed) != "c2" || got.Registry != "ghcr.io" {
		t.Fatalf("credential after replace: %+v", got)
	}
	for _, bad := range [][2][]byte{{nil, []byte("x")}, {[]byte("c2"), nil}} {
		if err := st.ReplaceSealed(ctx, domain.SealedRegistryCredential, cred.ID, bad[0], bad[1]); err == nil {
			t.Fatalf("ReplaceSealed(%q, %q) succeeded", bad[0], bad[1])
		}
	}
	if err := st.ReplaceSealed(ctx, "tokens", string(s.ID), resealed, []byte("x")); err == nil || errors.Is(err, store.ErrNotFound) {
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
	ids := make([]domain.SecretID, rows)
	for i := range ids {
		s := newSecret("generic", fmt.Sprintf("contended-%d", i))
		must(t, stores[0].PutSecret(ctx, s))
		ids[i] = s.ID
	}
	var mu sync.Mutex
	wins := map[domain.SecretID]int{}
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
				err = st.ReplaceSealed(ctx, domain.SealedSecret, string(id), cur.Sealed, fmt.Appendf(nil, "%s/by-%d", cur.Sealed, w))
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
