package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/client"
)

// maxCopyEntries bounds how many files one `session cp` of a directory
// copies (a guest's directory listing is the guest's word).
const maxCopyEntries = 10000

func (a sessionCmds) sessionCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files into or out of a session",
		Long: `Copy a file or a directory (recursively) between this machine and a session.
One side is ID:PATH, a path in the session (absolute); the other is a local
path. A directory's files keep their permissions; a local DST that is an
existing directory receives SRC under its own name. An Idle session resumes.`,
		Example: `  engrams session cp ./fix.patch $id:/work/fix.patch
  engrams session cp $id:/work/app/out.log .
  engrams session cp $id:/work/app ./app-copy`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			sid, remote, up, err := cpSides(args[0], args[1])
			if err != nil {
				return usageError{err}
			}
			cp := copier{files: c.Files(), sid: sid, out: cmd.ErrOrStderr()}
			if up {
				return cp.upload(cmd.Context(), args[0], remote)
			}
			local := args[1]
			if st, err := os.Stat(local); err == nil && st.IsDir() {
				local = filepath.Join(local, path.Base(remote)) // an existing directory receives SRC under its own name
			}
			return cp.download(cmd.Context(), remote, local)
		},
	}
}

// cpSides tells which argument is the session's: up is a copy into it.
func cpSides(src, dst string) (sid, remote string, up bool, err error) {
	sSID, sPath, sRemote := remoteArg(src)
	dSID, dPath, dRemote := remoteArg(dst)
	switch {
	case sRemote && dRemote:
		return "", "", false, errors.New("both sides are in a session: copy through this machine")
	case !sRemote && !dRemote:
		return "", "", false, errors.New("neither side is in a session: name one as ID:PATH")
	case dRemote:
		sid, remote, up = dSID, dPath, true
	default:
		sid, remote = sSID, sPath
	}
	if !path.IsAbs(remote) {
		return "", "", false, fmt.Errorf("%s: the session's path must be absolute", remote)
	}
	return sid, path.Clean(remote), up, nil
}

// remoteArg splits ID:PATH; a local path (./x, /x, or one without a
// colon) is not remote.
func remoteArg(s string) (sid, p string, ok bool) {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return "", "", false
	}
	sid, p, ok = strings.Cut(s, ":")
	return sid, p, ok && sid != ""
}

type copier struct {
	files client.FileClient
	sid   string
	out   io.Writer
	n     int
}

func (c *copier) count() error {
	if c.n++; c.n > maxCopyEntries {
		return fmt.Errorf("more than %d files: copy a smaller directory", maxCopyEntries)
	}
	return nil
}

// upload copies local (a file or a directory tree) to remote.
func (c *copier) upload(ctx context.Context, local, remote string) error {
	return filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil // directories are made by the files they hold; links and devices are skipped
		}
		if err := c.count(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		target := path.Join(remote, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := c.files.Put(ctx, c.sid, target, fi.Mode().Perm(), f); err != nil {
			return fmt.Errorf("upload %s to %s:%s: %w", p, c.sid, target, err)
		}
		fmt.Fprintf(c.out, "%s -> %s:%s\n", p, c.sid, target)
		return nil
	})
}

// download copies remote (a file or a directory tree) to local (its own
// path, not a directory to put it in).
func (c *copier) download(ctx context.Context, remote, local string) error {
	fi, err := c.files.Stat(ctx, c.sid, remote)
	if err != nil {
		return fmt.Errorf("stat %s:%s: %w", c.sid, remote, err)
	}
	if !fi.IsDir {
		return c.getFile(ctx, remote, local, fi.Mode)
	}
	entries, err := c.files.List(ctx, c.sid, remote)
	if err != nil {
		return fmt.Errorf("list %s:%s: %w", c.sid, remote, err)
	}
	if err := os.MkdirAll(local, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if err := c.count(); err != nil {
			return err
		}
		name := path.Base(e.Name)
		if name == "." || name == ".." || name == "/" || strings.ContainsAny(name, `/\`) {
			continue // a hostile listing's names never leave local
		}
		if err := c.download(ctx, path.Join(remote, name), filepath.Join(local, name)); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) getFile(ctx context.Context, remote, local, mode string) error {
	perm := os.FileMode(0o644)
	if len(mode) == 10 && mode[3] == 'x' {
		perm = 0o755
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), ".engrams-cp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := c.files.Get(ctx, c.sid, remote, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("download %s:%s: %w", c.sid, remote, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s:%s -> %s\n", c.sid, remote, local)
	return nil
}
