package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/secrets"
)

// imageMaterializer builds what a coordinator needs to enable images; it
// returns nil (images cannot be enabled) when bs is nil.
func imageMaterializer(bs blob.Store, workDir string, log *slog.Logger) (imagejobs.Materializer, func(), error) {
	if bs == nil {
		return nil, func() {}, nil
	}
	m, closeFn, err := image.NewForBlobStore(bs, workDir, log)
	if err != nil {
		return nil, nil, err
	}
	return m, closeFn, nil
}

// secrets opens the key that seals registry credentials; no path means
// none is kept. create allows making the file on first use (one replica);
// replicas sharing a database must share one key, so they only load it.
func secretsKey(path string, create bool) (secrets.Sealer, error) {
	if path == "" {
		return nil, nil
	}
	open := secret.Load
	if create {
		open = secret.LoadOrCreate
	}
	s, err := open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("secrets key %s does not exist: replicas sharing a database need the same key; "+
			"create it once with `engrams secrets-key create %s` and copy it to every replica (mode 0600)", path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return s, nil
}

// secretsKeyCmd creates the key file replicas share.
func secretsKeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secrets-key", Short: "Manage the key that seals secrets at rest"}
	cmd.AddCommand(&cobra.Command{
		Use:   "create FILE",
		Short: "Create a secrets key file (mode 0600) for --secrets-key-file",
		Long: `Create the key (a tink AEAD keyset) that seals registry credentials and other
secrets in the database. Give every coordinator replica the same file with
--secrets-key-file; losing it makes the sealed secrets unreadable. An existing
file is kept, not replaced.`,
		Example: "  engrams secrets-key create /etc/engrams/secrets.keyset",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := secret.LoadOrCreate(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secrets key is in %s\n", args[0])
			return nil
		},
	})
	return cmd
}
