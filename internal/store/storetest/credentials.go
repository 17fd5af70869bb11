package storetest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

func testCredentials(t *testing.T, st store.Store) {
	ctx := t.Context()
	// Bytes that text columns or encodings would mangle.
	sealed := []byte{0x01, 0x00, 0xff, 0xfe, '\'', '"', '\\', 0x80, 0x00, 'x', 0xc3, 0x28}
	a := domain.RegistryCredential{ID: newID(), Registry: "ghcr.io", Username: "bot", Sealed: sealed, CreatedAt: t0}
	must(t, st.PutCredential(ctx, a))
	b := domain.RegistryCredential{ID: newID(), Registry: "registry.example:5000", Sealed: []byte{0}}
	must(t, st.PutCredential(ctx, b))

	got, err := st.GetCredential(ctx, a.ID)
	must(t, err)
	if got.ID != a.ID || got.Registry != a.Registry || got.Username != a.Username || !bytes.Equal(got.Sealed, sealed) {
		t.Fatalf("credential = %+v, want %+v", got, a)
	}
	wantTime(t, "created_at", got.CreatedAt, t0)
	got, err = st.GetCredential(ctx, b.ID)
	must(t, err)
	if got.Username != "" || !bytes.Equal(got.Sealed, []byte{0}) || got.CreatedAt.IsZero() {
		t.Fatalf("credential = %+v, want %+v with a creation time", got, b)
	}

	must(t, st.DeleteCredential(ctx, a.ID))
	_, err = st.GetCredential(ctx, a.ID)
	wantErr(t, err, store.ErrNotFound)
	must(t, st.DeleteCredential(ctx, a.ID)) // idempotent
	must(t, st.DeleteCredential(ctx, newID()))
	if _, err := st.GetCredential(ctx, b.ID); err != nil {
		t.Fatalf("deleting one credential lost another: %v", err)
	}
	// The id is free again once deleted.
	a.Sealed = []byte("resealed")
	must(t, st.PutCredential(ctx, a))
	got, err = st.GetCredential(ctx, a.ID)
	must(t, err)
	if string(got.Sealed) != "resealed" {
		t.Fatalf("sealed = %q, want resealed", got.Sealed)
	}
}

func testCredentialErrors(t *testing.T, st store.Store) {
	ctx := t.Context()
	c := domain.RegistryCredential{ID: newID(), Registry: "ghcr.io", Sealed: []byte("s1"), CreatedAt: t0}
	must(t, st.PutCredential(ctx, c))
	cases := []struct {
		name string
		c    domain.RegistryCredential
		want error // nil: any error
	}{
		{"same id", domain.RegistryCredential{ID: c.ID, Registry: "quay.io", Sealed: []byte("s2")}, store.ErrConflict},
		{"no id", domain.RegistryCredential{Registry: "quay.io", Sealed: []byte("s2")}, nil},
		{"no registry", domain.RegistryCredential{ID: newID(), Sealed: []byte("s2")}, nil},
		{"nothing sealed", domain.RegistryCredential{ID: newID(), Registry: "quay.io", Sealed: []byte{}}, nil},
	}
	for _, tc := range cases {
		err := st.PutCredential(ctx, tc.c)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: PutCredential error = %v, want %v", tc.name, err, tc.want)
		}
	}
	got, err := st.GetCredential(ctx, c.ID)
	must(t, err)
	if string(got.Sealed) != "s1" || got.Registry != "ghcr.io" {
		t.Fatalf("credential after a refused put = %+v", got)
	}
	_, err = st.GetCredential(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
	wantTime(t, "created_at", got.CreatedAt, t0)
}
