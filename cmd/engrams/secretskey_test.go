package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/secrets"
)

// runKeyCmd runs `secrets-key ARGS...` and returns its stdout and stderr.
func runKeyCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := secretsKeyCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// keyMaterial is every key's base64 value in a JSON keyset file.
func keyMaterial(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ks struct {
		Key []struct {
			KeyData struct {
				Value string `json:"value"`
			} `json:"keyData"`
		} `json:"key"`
	}
	if err := json.Unmarshal(raw, &ks); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range ks.Key {
		out = append(out, k.KeyData.Value)
	}
	return out
}

// TestSecretsKeyRotateShow: create, rotate and show a key file; show
// names the primary and never prints key material.
func TestSecretsKeyRotateShow(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "secrets.keyset")
	if _, _, err := runKeyCmd(t, "create", path); err != nil {
		t.Fatal(err)
	}
	first, err := secret.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runKeyCmd(t, "rotate", path)
	if err != nil || !strings.Contains(out, "as the primary") {
		t.Fatalf("rotate: %q, %v", out, err)
	}
	text, _, err := runKeyCmd(t, "show", path)
	if err != nil {
		t.Fatal(err)
	}
	js, _, err := runKeyCmd(t, "info", path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v keysetView
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatalf("show --json: %v: %s", err, js)
	}
	if len(v.Keys) != 2 || v.Keys[0].ID != first[0].ID || v.Keys[0].Primary || !v.Keys[1].Primary || v.Primary != v.Keys[1].ID {
		t.Fatalf("show --json = %+v (first key %d)", v, first[0].ID)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "yes") || strings.Contains(lines[1], "yes") {
		t.Fatalf("show:\n%s", text)
	}
	material := keyMaterial(t, path)
	if len(material) != 2 {
		t.Fatalf("the file holds %d keys' material, want 2", len(material))
	}
	for _, m := range material {
		if len(m) < 16 || strings.Contains(text, m) || strings.Contains(js, m) {
			t.Fatalf("show prints key material %q", m)
		}
	}
}

// TestSecretsKeyReseal: reseal opens an SQLite database with the server's
// flags, moves every secret to the rotated primary and prints the counts;
// a second run re-seals nothing; a row it cannot open makes it fail.
func TestSecretsKeyReseal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, key := filepath.Join(dir, "engrams.db"), filepath.Join(dir, "secrets.keyset")
	ids := seedSecrets(t, db, key, 3)
	if _, _, err := runKeyCmd(t, "rotate", key); err != nil {
		t.Fatal(err)
	}
	out, progress, err := runKeyCmd(t, "reseal", "--database", db, "--secrets-key-file", key)
	if err != nil {
		t.Fatalf("reseal: %v\n%s%s", err, out, progress)
	}
	if !strings.Contains(out, "re-sealed 4 of 4 sealed rows") || !strings.Contains(progress, "re-sealing under key") {
		t.Fatalf("reseal printed:\n%s\n%s", out, progress)
	}
	s, err := secret.Load(key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(t.Context(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		row, err := st.GetSecret(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !s.UnderPrimary(row.Sealed) {
			t.Errorf("secret %s is not under the primary after reseal", id)
		}
	}
	st.Close()
	out, _, err = runKeyCmd(t, "reseal", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "re-sealed 0 of 4 sealed rows (4 already under the primary") {
		t.Fatalf("a second reseal: %v\n%s", err, out)
	}

	// A key file without the key the rows use: they are listed, exit 1.
	other := filepath.Join(t.TempDir(), "other.keyset")
	if _, err := secret.LoadOrCreate(other); err != nil {
		t.Fatal(err)
	}
	out, _, err = runKeyCmd(t, "reseal", "--database", db, "--secrets-key-file", other)
	if err == nil || !strings.Contains(err.Error(), "4 rows could not be re-sealed") || strings.Count(out, "failed: secret") != 4 {
		t.Fatalf("reseal with a foreign key: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"reseal", "--database", db},
		{"reseal", "--database", filepath.Join(dir, "missing.db"), "--secrets-key-file", key},
		{"reseal", "--data-dir", dir, "--database", db},
	} {
		if _, _, err := runKeyCmd(t, args...); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); err == nil {
		t.Error("reseal created a database")
	}
}

// seedSecrets stores n generic secrets and the gateway's own key in a
// fresh SQLite database, sealed with a new key file; it returns their ids.
func seedSecrets(t *testing.T, db, key string, n int) []domain.SecretID {
	t.Helper()
	s, err := secret.LoadOrCreate(key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err := secrets.New(secrets.Deps{Store: st, Sealer: s})
	if err != nil {
		t.Fatal(err)
	}
	var ids []domain.SecretID
	for i := range n {
		sv, err := v.Create(t.Context(), secrets.SecretRequest{Org: domain.FirstOrg, Name: "s" + string(rune('a'+i)), Kind: apiv1.SecretGeneric, Value: []byte("value")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sv.Secret.ID)
	}
	// The gateway's own key, as the gateway stores it.
	gw := domain.Secret{ID: "gateway-key-id", Kind: "gateway_key", Name: "engrams-gateway-key", Meta: []byte(`{}`)}
	if gw.Sealed, err = s.Seal([]byte("hmac-key"), secrets.AssociatedData(gw.ID)); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSecret(t.Context(), gw); err != nil {
		t.Fatal(err)
	}
	return append(ids, gw.ID)
}
