package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
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
		ID: newID(), Kind: kind, Name: name, Sealed: []byte("sealed:" + name),
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
	got, err = st.GetSecretByName(ctx, "github")
	must(t, err)
	wantSecret(t, got, git)
	got, err = st.GetSecret(ctx, bare.ID)
	must(t, err)
	if got.Meta != nil || got.CreatedAt.IsZero() {
		t.Fatalf("secret put without meta or time = %+v, want no meta and a creation time", got)
	}
	bare.CreatedAt = got.CreatedAt

	list, err := st.ListSecrets(ctx)
	must(t, err)
	if len(list) != 3 {
		t.Fatalf("listed %d secrets, want 3", len(list))
	}
	for i, want := range []domain.Secret{anthropic, git, bare} { // by name
		wantSecret(t, list[i], want)
	}
	_, err = st.GetSecret(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
	_, err = st.GetSecretByName(ctx, "nope")
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
	_, err = st.GetSecretByName(ctx, "anthropic")
	wantErr(t, err, store.ErrNotFound)
	list, err := st.ListSecrets(ctx)
	must(t, err)
	if len(list) != 1 || list[0].ID != other.ID {
		t.Fatalf("live secrets after delete = %+v, want only %s", list, other.ID)
	}

	// Deleting again changes nothing; an unknown id is not found.
	must(t, st.DeleteSecret(ctx, old.ID, deletedAt.Add(time.Hour)))
	got, err = st.GetSecret(ctx, old.ID)
	must(t, err)
	wantSecret(t, got, old)
	wantErr(t, st.DeleteSecret(ctx, newID(), t0), store.ErrNotFound)

	// The name is taken by a new secret; the deleted one's id stays taken.
	fresh := newSecret("anthropic_api_key", "anthropic")
	must(t, st.PutSecret(ctx, fresh))
	got, err = st.GetSecretByName(ctx, "anthropic")
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
		{"no kind", domain.Secret{ID: newID(), Name: "a", Sealed: []byte("x")}, nil},
		{"no name", domain.Secret{ID: newID(), Kind: "git_https", Sealed: []byte("x")}, nil},
		{"nothing sealed", domain.Secret{ID: newID(), Kind: "git_https", Name: "a", Sealed: []byte{}}, nil},
		{"bad meta", badMeta, nil},
	}
	for _, c := range cases {
		err := st.PutSecret(ctx, c.s)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: PutSecret error = %v, want %v", c.name, err, c.want)
		}
	}
	list, err := st.ListSecrets(ctx)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("listed %d secrets after refused puts, want 1: %+v", len(list), list)
	}
	wantSecret(t, list[0], s)
}
