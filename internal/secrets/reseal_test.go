package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/testutil"
)

// backend opens two stores over one fresh database (the same store twice
// for SQLite, two instances for Postgres, which replicas share).
type backend struct {
	name string
	open func(t *testing.T) (store.Store, store.Store)
}

func backends() []backend {
	return []backend{
		{"sqlite", func(t *testing.T) (store.Store, store.Store) {
			st := coordinatortest.NewStore(t)
			return st, st
		}},
		{"postgres", func(t *testing.T) (store.Store, store.Store) {
			url := testutil.NewPostgresDB(t)
			open := func() store.Store {
				st, err := postgres.Open(t.Context(), postgres.Config{URL: url}, postgres.Deps{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			return open(), open()
		}},
	}
}

// sealedRows are the rows a deployment seals, made under the keyset at
// path: users' secrets, the gateway's own key, a deleted secret and
// registry credentials (sealed as imagejobs seals them).
type sealedRows struct {
	plain map[string][]byte // row id → value, for every live sealed row
	kinds map[string]domain.SealedKind
}

func makeSealedRows(t *testing.T, st store.Store, s *secret.Sealer) sealedRows {
	t.Helper()
	ctx := t.Context()
	v, err := New(Deps{Store: st, Sealer: s})
	if err != nil {
		t.Fatal(err)
	}
	rows := sealedRows{plain: map[string][]byte{}, kinds: map[string]domain.SealedKind{}}
	for i, req := range []SecretRequest{
		{Name: "ant", Kind: apiv1.SecretAnthropicAPIKey, Value: []byte(testKey)},
		{Name: "gh", Kind: apiv1.SecretGitHTTPS, Value: []byte("ghp_token"), Meta: apiv1.SecretMeta{Host: "github.com"}},
		{Name: "pem", Kind: apiv1.SecretGeneric, Value: []byte("line 1\nline 2\n")},
		{Name: "gone", Kind: apiv1.SecretGeneric, Value: []byte("deleted")},
	} {
		req.Org = domain.FirstOrg
		sv, err := v.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if _, err := v.Delete(ctx, domain.FirstOrg, "gone"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		rows.plain[string(sv.Secret.ID)], rows.kinds[string(sv.Secret.ID)] = req.Value, domain.SealedSecret
	}
	gw, err := v.putSealedSecret(ctx, "", "gateway_key", "engrams-gateway-key", []byte("gateway-hmac-key"), apiv1.SecretMeta{})
	if err != nil {
		t.Fatal(err)
	}
	rows.plain[string(gw.ID)], rows.kinds[string(gw.ID)] = []byte("gateway-hmac-key"), domain.SealedSecret
	for i := range 2 {
		id := fmt.Sprintf("cred-%d", i)
		plain := fmt.Appendf(nil, `{"username":"u%d","password":"p%d"}`, i, i)
		sealed, err := s.Seal(plain, domain.SealedRegistryCredential.AssociatedData(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutCredential(ctx, domain.RegistryCredential{ID: id, Registry: "ghcr.io", Sealed: sealed}); err != nil {
			t.Fatal(err)
		}
		rows.plain[id], rows.kinds[id] = plain, domain.SealedRegistryCredential
	}
	hook := "hook-automation"
	sealed, err := s.Seal([]byte("whsec"), domain.SealedHookSecret.AssociatedData(hook))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAutomation(ctx, domain.Automation{ID: domain.AutomationID(hook), Org: domain.FirstOrg, Name: "hook", TriggerKind: "webhook",
		HookSlug: "hook", HookSecret: sealed}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	rows.plain[hook], rows.kinds[hook] = []byte("whsec"), domain.SealedHookSecret
	creds, err := s.Seal([]byte(`{"bot_token":"xoxb"}`), domain.SealedIntegration.AssociatedData("slack"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationSlack, Org: domain.FirstOrg, Sealed: creds}); err != nil {
		t.Fatal(err)
	}
	rows.plain["slack"], rows.kinds["slack"] = []byte(`{"bot_token":"xoxb"}`), domain.SealedIntegration
	return rows
}

// sealedNow reads a row's sealed bytes.
func sealedNow(t *testing.T, st store.Store, kind domain.SealedKind, id string) []byte {
	t.Helper()
	if kind == domain.SealedIntegration {
		in, err := st.GetIntegration(t.Context(), domain.IntegrationKind(id))
		if err != nil {
			t.Fatal(err)
		}
		return in.Sealed
	}
	if kind == domain.SealedHookSecret {
		a, err := st.GetAutomation(t.Context(), domain.AutomationID(id))
		if err != nil {
			t.Fatal(err)
		}
		return a.HookSecret
	}
	if kind == domain.SealedRegistryCredential {
		c, err := st.GetCredential(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return c.Sealed
	}
	s, err := st.GetSecret(t.Context(), domain.SecretID(id))
	if err != nil {
		t.Fatal(err)
	}
	return s.Sealed
}

// check asserts every row is sealed with key wantKey and opens with s to
// its value.
func (rows sealedRows) check(t *testing.T, st store.Store, s *secret.Sealer, wantKey uint32) {
	t.Helper()
	for id, plain := range rows.plain {
		kind := rows.kinds[id]
		ct := sealedNow(t, st, kind, id)
		if got, _ := secret.KeyID(ct); got != wantKey {
			t.Errorf("%s %s is sealed with key %d, want %d", kind, id, got, wantKey)
		}
		if pt, err := s.Open(ct, kind.AssociatedData(id)); err != nil || !bytes.Equal(pt, plain) {
			t.Errorf("%s %s opens to %q, %v; want %q", kind, id, pt, err, plain)
		}
	}
}

func keysetFile(t *testing.T) (string, *secret.Sealer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyset.json")
	s, err := secret.LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, s
}

func rotate(t *testing.T, path string) *secret.Sealer {
	t.Helper()
	if _, err := secret.Rotate(path); err != nil {
		t.Fatal(err)
	}
	s, err := secret.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dropKey deletes key id from the keyset file: a test-only edit standing
// for an operator retiring the old key after re-sealing.
func dropKey(t *testing.T, path string, id uint32) *secret.Sealer {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(f))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	m := keyset.NewManagerFromHandle(h)
	if err := m.Delete(id); err != nil {
		t.Fatal(err)
	}
	if h, err = m.Handle(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(&buf)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := secret.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func counts(r ResealReport) map[domain.SealedKind]ResealCount {
	out := map[domain.SealedKind]ResealCount{}
	for _, c := range r.Counts {
		out[c.Kind] = c
	}
	return out
}

// TestResealMovesEveryRow: after a rotation, re-sealing moves every sealed
// row of every kind to the new primary; a second run changes nothing; and
// once the old key is dropped every row still opens.
func TestResealMovesEveryRow(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st, _ := b.open(t)
			path, v1 := keysetFile(t)
			rows := makeSealedRows(t, st, v1)
			old, err := v1.Seal([]byte("kept aside"), []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			rows.check(t, st, v1, v1.PrimaryKeyID())

			v2 := rotate(t, path)
			rows.check(t, st, v2, v1.PrimaryKeyID()) // the old key still opens them
			var progress []ResealCount
			r, err := Reseal(t.Context(), ResealDeps{Store: st, Sealer: v2, Progress: func(c ResealCount) { progress = append(progress, c) }})
			if err != nil {
				t.Fatal(err)
			}
			want := map[domain.SealedKind]ResealCount{
				domain.SealedSecret:             {Kind: domain.SealedSecret, Seen: 4, Resealed: 4},
				domain.SealedRegistryCredential: {Kind: domain.SealedRegistryCredential, Seen: 2, Resealed: 2},
				domain.SealedHookSecret:         {Kind: domain.SealedHookSecret, Seen: 1, Resealed: 1},
				domain.SealedIntegration:        {Kind: domain.SealedIntegration, Seen: 1, Resealed: 1},
			}
			if got := counts(r); len(got) != len(want) || got[domain.SealedSecret] != want[domain.SealedSecret] ||
				got[domain.SealedRegistryCredential] != want[domain.SealedRegistryCredential] ||
				got[domain.SealedHookSecret] != want[domain.SealedHookSecret] || got[domain.SealedIntegration] != want[domain.SealedIntegration] ||
				len(r.Failures) != 0 {
				t.Fatalf("reseal = %+v, want %+v", r, want)
			}
			if len(progress) != 4 || progress[1] != want[domain.SealedRegistryCredential] || progress[2] != want[domain.SealedHookSecret] {
				t.Errorf("progress = %+v", progress)
			}
			rows.check(t, st, v2, v2.PrimaryKeyID())

			again, err := Reseal(t.Context(), ResealDeps{Store: st, Sealer: v2})
			if err != nil {
				t.Fatal(err)
			}
			if c := counts(again); c[domain.SealedSecret].Resealed != 0 || c[domain.SealedSecret].Current != 4 || c[domain.SealedRegistryCredential].Current != 2 {
				t.Fatalf("a second reseal = %+v, want every row current", again)
			}

			v3 := dropKey(t, path, v1.PrimaryKeyID())
			if len(v3.Keys()) != 1 {
				t.Fatalf("keys after the drop: %+v", v3.Keys())
			}
			if _, err := v3.Open(old, []byte("x")); !errors.Is(err, secret.ErrOpen) {
				t.Fatalf("the dropped key still opens: %v", err)
			}
			rows.check(t, st, v3, v2.PrimaryKeyID())
			vault, err := New(Deps{Store: st, Sealer: v3})
			if err != nil {
				t.Fatal(err)
			}
			for id, plain := range rows.plain {
				if rows.kinds[id] != domain.SealedSecret {
					continue
				}
				if _, got, err := vault.Open(t.Context(), domain.SecretID(id)); err != nil || !bytes.Equal(got, plain) {
					t.Errorf("vault opens %s to %q, %v", id, got, err)
				}
			}
		})
	}
}

// failingStore fails the write after the first n, like a crash mid-way.
type failingStore struct {
	store.Store
	mu     sync.Mutex
	writes int
	n      int
	listed func() // runs after each list, before it returns
}

func (f *failingStore) ListSealed(ctx context.Context, kind domain.SealedKind, after string, limit int) ([]domain.SealedValue, error) {
	page, err := f.Store.ListSealed(ctx, kind, after, limit)
	if f.listed != nil {
		f.listed()
	}
	return page, err
}

func (f *failingStore) ReplaceSealed(ctx context.Context, kind domain.SealedKind, id string, old, sealed []byte) error {
	f.mu.Lock()
	f.writes++
	crash := f.n > 0 && f.writes > f.n
	f.mu.Unlock()
	if crash {
		return errors.New("connection reset")
	}
	return f.Store.ReplaceSealed(ctx, kind, id, old, sealed)
}

// TestResealResumes: a run stopped mid-way leaves every row readable, and
// the next run re-seals only what is left.
func TestResealResumes(t *testing.T) {
	t.Parallel()
	st := coordinatortest.NewStore(t)
	path, v1 := keysetFile(t)
	rows := makeSealedRows(t, st, v1)
	v2 := rotate(t, path)
	_, err := Reseal(t.Context(), ResealDeps{Store: &failingStore{Store: st, n: 3}, Sealer: v2})
	if err == nil {
		t.Fatal("a run whose store failed reported no error")
	}
	moved := 0
	for id := range rows.plain {
		ct := sealedNow(t, st, rows.kinds[id], id)
		if v2.UnderPrimary(ct) {
			moved++
		}
		if _, err := v2.Open(ct, rows.kinds[id].AssociatedData(id)); err != nil {
			t.Errorf("%s after the failed run: %v", id, err)
		}
	}
	if moved != 3 {
		t.Fatalf("%d rows re-sealed before the failure, want 3", moved)
	}
	r, err := Reseal(t.Context(), ResealDeps{Store: st, Sealer: v2})
	if err != nil {
		t.Fatal(err)
	}
	c := counts(r)
	if got := c[domain.SealedSecret].Resealed + c[domain.SealedRegistryCredential].Resealed + c[domain.SealedHookSecret].Resealed + c[domain.SealedIntegration].Resealed; got != len(rows.plain)-3 {
		t.Fatalf("the second run re-sealed %d rows, want %d: %+v", got, len(rows.plain)-3, r)
	}
	rows.check(t, st, v2, v2.PrimaryKeyID())
}

// TestResealConcurrent: two runs at once (over two store instances on
// Postgres) re-seal each row exactly once between them, and a secret
// deleted while a run is at it stays deleted.
func TestResealConcurrent(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			a, bst := b.open(t)
			path, v1 := keysetFile(t)
			rows := makeSealedRows(t, a, v1)
			doomed, err := New(Deps{Store: a, Sealer: v1})
			if err != nil {
				t.Fatal(err)
			}
			victim, err := doomed.Create(t.Context(), SecretRequest{Org: domain.FirstOrg, Name: "victim", Kind: apiv1.SecretGeneric, Value: []byte("v")})
			if err != nil {
				t.Fatal(err)
			}
			v2 := rotate(t, path)
			// The first run deletes the victim right after listing it, so it
			// then holds a value the row no longer has.
			deleteVictim := func() {
				if err := a.DeleteSecret(context.Background(), victim.Secret.ID, time.Now()); err != nil {
					t.Error(err)
				}
			}
			var wg sync.WaitGroup
			reports := make([]ResealReport, 2)
			for i, st := range []store.Store{&failingStore{Store: a, listed: deleteVictim}, bst} {
				wg.Go(func() {
					r, err := Reseal(t.Context(), ResealDeps{Store: st, Sealer: v2})
					if err != nil {
						t.Error(err)
					}
					reports[i] = r
				})
			}
			wg.Wait()
			resealed := 0
			for _, r := range reports {
				for _, c := range r.Counts {
					resealed += c.Resealed
					if c.Failed != 0 || c.Resealed+c.Current+c.Changed != c.Seen {
						t.Errorf("count %+v does not add up", c)
					}
				}
			}
			// Every live row once; the victim once at most (only before it
			// was deleted).
			if resealed != len(rows.plain) && resealed != len(rows.plain)+1 {
				t.Fatalf("%d re-seals between the two runs, want %d (each row exactly once): %+v", resealed, len(rows.plain), reports)
			}
			rows.check(t, a, v2, v2.PrimaryKeyID())
			if got, err := a.GetSecret(t.Context(), victim.Secret.ID); err != nil || got.DeletedAt.IsZero() || got.Sealed != nil {
				t.Fatalf("the secret deleted mid-run: %+v, %v", got, err)
			}
		})
	}
}

// TestResealReportsUnopenable: a row sealed with a key the keyset lacks is
// counted and listed, and the rest are re-sealed.
func TestResealReportsUnopenable(t *testing.T) {
	t.Parallel()
	st := coordinatortest.NewStore(t)
	path, v1 := keysetFile(t)
	rows := makeSealedRows(t, st, v1)
	foreign, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := foreign.Seal([]byte("orphan-value"), domain.SealedRegistryCredential.AssociatedData("orphan"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutCredential(t.Context(), domain.RegistryCredential{ID: "orphan", Registry: "quay.io", Sealed: sealed}); err != nil {
		t.Fatal(err)
	}
	v2 := rotate(t, path)
	r, err := Reseal(t.Context(), ResealDeps{Store: st, Sealer: v2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed() != 1 || len(r.Failures) != 1 || r.Failures[0].ID != "orphan" || r.Failures[0].Kind != domain.SealedRegistryCredential {
		t.Fatalf("reseal = %+v, want the orphan listed as failed", r)
	}
	if bytes.Contains([]byte(r.Failures[0].Err), []byte("orphan-value")) {
		t.Fatalf("the failure quotes the value: %s", r.Failures[0].Err)
	}
	if got := sealedNow(t, st, domain.SealedRegistryCredential, "orphan"); !bytes.Equal(got, sealed) {
		t.Fatal("an unopenable row was rewritten")
	}
	rows.check(t, st, v2, v2.PrimaryKeyID())
}
