package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/secrets"
)

// secretsKey opens the key that seals secrets at rest; no path means
// none is kept (a nil Sealer). create allows making the file on first use
// (one replica); replicas sharing a database must share one key, so they
// only load it.
func secretsKey(path string, create bool) (secrets.Sealer, error) {
	if path == "" {
		return nil, nil
	}
	return loadSecretsKey(path, create)
}

// loadSecretsKey opens the key file at path (see secretsKey).
func loadSecretsKey(path string, create bool) (*secret.Sealer, error) {
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

// secretsKeyCmd manages the key file replicas share.
func secretsKeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secrets-key", Short: "Manage the key that seals secrets at rest",
		Long: `Manage the key (a tink AEAD keyset file) that seals secrets, registry
credentials and the model gateway's key in the database.

Rotating it:
  1. engrams secrets-key rotate FILE      a new primary key; the old ones stay
  2. copy FILE to every replica (mode 0600) and restart them: each loads it at start,
     and a secret sealed under the new key opens only where the new file is
  3. engrams secrets-key reseal --database DB --secrets-key-file FILE
     re-seals every row under the new key (safe while replicas serve)
  4. engrams secrets-key show FILE        which keys the file holds`}
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
	}, rotateKeyCmd(), showKeyCmd(), resealCmd())
	return cmd
}

func rotateKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate FILE",
		Short: "Add a new primary key to a secrets key file",
		Long: `Add a new AES256-GCM key to the keyset file and make it the primary: what is
sealed from then on uses it. The old keys stay in the file, so everything sealed
before still opens. The file is replaced atomically (mode 0600).

Then copy the file to every replica and restart them, and run
` + "`engrams secrets-key reseal`" + ` to move every sealed row to the new key.`,
		Example: "  engrams secrets-key rotate /etc/engrams/secrets.keyset",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := secret.Rotate(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added key %d as the primary of %s; copy it to every replica, restart them, then run `engrams secrets-key reseal`\n", k.ID, args[0])
			return nil
		},
	}
}

// keysetView is what `secrets-key show --json` prints.
type keysetView struct {
	File    string           `json:"file"`
	Primary uint32           `json:"primary_key_id"`
	Keys    []secret.KeyInfo `json:"keys"`
}

func showKeyCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show FILE",
		Aliases: []string{"info"},
		Short:   "List the keys of a secrets key file (never their material)",
		Example: "  engrams secrets-key show /etc/engrams/secrets.keyset --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := secret.Inspect(args[0])
			if err != nil {
				return err
			}
			v := keysetView{File: args[0], Keys: keys}
			for _, k := range keys {
				if k.Primary {
					v.Primary = k.ID
				}
			}
			return printKeyset(cmd.OutOrStdout(), v, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printKeyset(w io.Writer, v keysetView, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintf(w, "%-12s %-8s %-10s %-6s %s\n", "KEY ID", "PRIMARY", "STATUS", "PREFIX", "TYPE")
	for _, k := range v.Keys {
		primary := ""
		if k.Primary {
			primary = "yes"
		}
		fmt.Fprintf(w, "%-12d %-8s %-10s %-6s %s\n", k.ID, primary, k.Status, k.Prefix, strings.TrimPrefix(k.Type, "type.googleapis.com/"))
	}
	return nil
}

// resealFlags are the settings of `secrets-key reseal`: the store and key
// flags of `server`, read from the same ENGRAMS_* variables.
type resealFlags struct {
	database, keyFile, dataDir, logLevel string
}

func resealCmd() *cobra.Command {
	var f resealFlags
	cmd := &cobra.Command{
		Use:   "reseal",
		Short: "Re-seal every sealed row under the key file's primary key",
		Long: `Re-seal every value sealed at rest (secrets, the model gateway's key, registry
credentials) that is not under the primary key of --secrets-key-file yet.

It opens the database itself, with the --database and --secrets-key-file of
` + "`engrams server`" + ` (or ENGRAMS_DATABASE and ENGRAMS_SECRETS_KEY_FILE), and needs
no API, listener or cluster secret: it is a one-off after a rotation, not part
of a replica. Each row is written back in its own conditional write that applies
only while the row still holds what was read, so it is safe while replicas serve
(once they all have the rotated file), beside another run, and after a crash:
run it again and it re-seals only what is left. A row sealed with a key the file
lacks is listed and makes it exit 1; nothing else about it changes.`,
		Example: `  engrams secrets-key reseal --database postgres://engrams@db/engrams --secrets-key-file /etc/engrams/secrets.keyset
  engrams secrets-key reseal --data-dir ~/.local/share/engrams     # what engrams dev keeps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.database, "database", env("DATABASE", ""), "postgres:// URL, or the path of an SQLite file (as for server)")
	fs.StringVar(&f.keyFile, "secrets-key-file", env("SECRETS_KEY_FILE", ""), "the rotated key file (as for server)")
	fs.StringVar(&f.dataDir, "data-dir", "", "an `engrams dev` data dir: its database and key file")
	fs.StringVar(&f.logLevel, "log-level", env("LOG_LEVEL", "warn"), "debug, info, warn or error")
	return cmd
}

func (f *resealFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	if f.dataDir != "" {
		if f.database != "" || f.keyFile != "" {
			return errors.New("--data-dir names both the database and the key file: give it alone")
		}
		f.database, f.keyFile = filepath.Join(f.dataDir, "engrams.db"), filepath.Join(f.dataDir, "secrets.keyset")
	}
	if f.keyFile == "" {
		return errors.New("--secrets-key-file is required: the rotated key file the replicas use")
	}
	if f.database != "" && !sharedDatabase(f.database) {
		if _, err := os.Stat(strings.TrimPrefix(f.database, "sqlite://")); err != nil {
			return fmt.Errorf("database %s: %w", f.database, err)
		}
	}
	sealer, err := loadSecretsKey(f.keyFile, false)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logLevel, "text")
	if err != nil {
		return err
	}
	st, err := openStore(ctx, f.database, log)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Fprintf(stderr, "re-sealing under key %d of %s\n", sealer.PrimaryKeyID(), f.keyFile)
	r, err := secrets.Reseal(ctx, secrets.ResealDeps{Store: st, Sealer: sealer, Progress: func(c secrets.ResealCount) {
		fmt.Fprintf(stderr, "  %s: %d seen, %d re-sealed\n", c.Kind, c.Seen, c.Resealed)
	}})
	printReseal(stdout, r)
	if err != nil {
		return fmt.Errorf("%w (what was re-sealed stays so: run it again to finish)", err)
	}
	if n := r.Failed(); n > 0 {
		return fmt.Errorf("%d rows could not be re-sealed (listed above): they were sealed with a key %s lacks", n, f.keyFile)
	}
	return nil
}

// printReseal prints the counts of a re-seal and its failures.
func printReseal(w io.Writer, r secrets.ResealReport) {
	var total secrets.ResealCount
	for _, c := range r.Counts {
		fmt.Fprintf(w, "%-20s %d rows: %d re-sealed, %d already under the primary, %d changed meanwhile, %d failed\n",
			c.Kind, c.Seen, c.Resealed, c.Current, c.Changed, c.Failed)
		total.Seen, total.Resealed, total.Current, total.Changed, total.Failed =
			total.Seen+c.Seen, total.Resealed+c.Resealed, total.Current+c.Current, total.Changed+c.Changed, total.Failed+c.Failed
	}
	fmt.Fprintf(w, "re-sealed %d of %d sealed rows (%d already under the primary, %d changed meanwhile, %d failed)\n",
		total.Resealed, total.Seen, total.Current, total.Changed, total.Failed)
	for _, fl := range r.Failures {
		fmt.Fprintf(w, "  failed: %s %s: %s\n", fl.Kind, fl.ID, fl.Err)
	}
}
