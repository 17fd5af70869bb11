package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// Credentials are the secrets a single-machine install keeps in a 0600 file
// so a restart reuses them: the store only has their hashes.
type Credentials struct {
	Token     string `json:"token"`                // a user API token
	HostID    string `json:"host_id,omitempty"`    // the local host, when there is one
	HostToken string `json:"host_token,omitempty"` // its credential
}

// EnsureCredentials returns the credentials in path if the store still
// accepts them, else mints what is missing (a user token; a host named
// hostName with its token when hostName != "") and rewrites the file.
func EnsureCredentials(ctx context.Context, st store.Store, path, hostName string) (Credentials, error) {
	var c Credentials
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &c); err != nil {
			return c, fmt.Errorf("read credentials %s: %w (delete the file to mint new ones)", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("read credentials: %w", err)
	}
	changed := false
	if !valid(ctx, st, c.Token, domain.TokenUser) {
		secret, prefix := access.NewSecret()
		t := ownerKey("bootstrap", prefix, secret)
		if err := st.CreateToken(ctx, t); err != nil {
			return c, fmt.Errorf("mint bootstrap token: %w", err)
		}
		c.Token, changed = secret, true
	}
	if hostName != "" && !valid(ctx, st, c.HostToken, domain.TokenHost) {
		id, secret, err := mintHost(ctx, st, hostName)
		if err != nil {
			return c, err
		}
		c.HostID, c.HostToken, changed = id, secret, true
	}
	if !changed {
		return c, nil
	}
	return c, writeFileAtomic(path, c)
}

// ownerKey is a personal key of the first organisation's first owner
// (the user a single-machine install signs in as; migration 00019 makes
// them).
func ownerKey(name, prefix, secret string) domain.Token {
	return domain.Token{ID: newID(), Name: name, Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner,
		Role: domain.RoleOwner, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: time.Now().UTC()}
}

func valid(ctx context.Context, st store.Store, secret string, kind domain.TokenKind) bool {
	if secret == "" {
		return false
	}
	t, err := st.TokenByHash(ctx, coordinator.HashToken(secret))
	return err == nil && t.Kind == kind
}

// mintHost creates a host row and its token, finding a free name.
func mintHost(ctx context.Context, st store.Store, name string) (id, secret string, err error) {
	for i := 0; i < 20; i++ {
		n := name
		if i > 0 {
			n = fmt.Sprintf("%s-%d", name, i+1)
		}
		secret, prefix := access.NewSecret()
		now := time.Now()
		h := domain.Host{ID: domain.HostID(newID()), Name: n, State: domain.HostNew, CreatedAt: now}
		t := domain.Token{ID: newID(), Name: "host " + n, Kind: domain.TokenHost, HostID: h.ID, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: now}
		err := st.CreateHost(ctx, h, t)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return "", "", fmt.Errorf("create host %s: %w", n, err)
		}
		return string(h.ID), secret, nil
	}
	return "", "", fmt.Errorf("create host: names %s..%s-20 are all taken", name, name)
}

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
