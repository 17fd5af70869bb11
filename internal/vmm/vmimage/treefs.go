package vmimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrTreeTooLarge is returned (wrapped) by TreeImage when the tree does not
// fit in the requested size; callers can ask for a larger disk.
var ErrTreeTooLarge = errors.New("tree does not fit in the filesystem")

// ErrUnsupportedTree is returned (wrapped) by TreeImage when spec.Order is set
// and the tree cannot be copied in that order: an entry the Order does not
// list (or lists twice, or before its directory), a name or symlink target
// with a line break (a debugfs script cannot express it), a socket, or an
// extended attribute value larger than a block.
var ErrUnsupportedTree = errors.New("tree cannot be copied entry by entry")

// TreeImageSpec says which tree to turn into which ext4 image.
type TreeImageSpec struct {
	Dir       string // flattened tree (as oci.Puller.Pull produces); read, never modified
	Path      string // image file to create; replaced atomically
	SizeBytes int64  // virtual size of the (sparse) image
	Seed      string // the UUID and directory hash seed derive from it
	Label     string // filesystem label; default "root"
	// Order, when set, lists every entry of the tree but its root (slash
	// separated, relative to Dir, each directory before its entries; as
	// oci.Image.Order), and the file system is populated in exactly that
	// order: inodes and blocks are allocated first come, first served, so two
	// trees whose orders share a prefix share the layout of that prefix.
	// When nil, mke2fs copies the tree depth first, by name.
	Order []string
}

// treeMkfsConf pins every mke2fs layout choice, so the host's
// /etc/mke2fs.conf (and the size-dependent "small"/"floppy" types) cannot
// change the bytes. Features are the ext4 defaults of e2fsprogs 1.46/1.47
// without orphan_file, which guest kernels before 5.15 cannot mount.
const treeMkfsConf = `[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384
	reserved_ratio = 0
	lazy_itable_init = false
	lazy_journal_init = false
[fs_types]
	floppy = {
		inode_ratio = 16384
	}
	small = {
		inode_ratio = 16384
	}
	ext4 = {
		features = has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize
	}
`

// TreeImage builds an ext4 image of spec.SizeBytes from the tree at spec.Dir
// without mounting anything. The same tree, seed and size give the same
// bytes: the UUID and hash seed derive from the seed, the layout is pinned
// (treeMkfsConf, not the host's), the access, change and creation time of
// every inode is buildEpoch, and ownership, modes, modification times,
// symlinks, hard links and xattrs are the tree's. It relies, as the other
// images do, on one e2fsprogs version. Without spec.Order, mke2fs copies the
// tree depth first, each directory's entries sorted by name, so one added
// entry moves the inodes and blocks of everything copied after it. With it,
// mke2fs makes an empty file system and one debugfs script creates the
// entries in exactly that order (populate.go).
// The backup superblocks and group descriptors are then mke2fs's, of the
// empty file system (debugfs, like the kernel, updates only the primary
// ones), which e2fsck accepts.
func (b *Builder) TreeImage(ctx context.Context, spec TreeImageSpec) error {
	if err := b.treeImage(ctx, spec); err != nil {
		return fmt.Errorf("build tree image %s from %s: %w", spec.Path, spec.Dir, err)
	}
	return nil
}

func (b *Builder) treeImage(ctx context.Context, spec TreeImageSpec) error {
	if spec.Dir == "" || spec.Path == "" || spec.SizeBytes <= 0 {
		return fmt.Errorf("dir, path and a positive size are required")
	}
	if st, err := os.Stat(spec.Dir); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", spec.Dir)
	}
	label := spec.Label
	if label == "" {
		label = "root"
	}
	var script string
	if spec.Order != nil {
		work, err := os.MkdirTemp(filepath.Dir(spec.Path), ".populate-")
		if err != nil {
			return fmt.Errorf("create work dir: %w", err)
		}
		defer os.RemoveAll(work)
		if script, err = writeOrderScript(spec.Dir, spec.Order, work); err != nil {
			return err
		}
	}
	tmp := spec.Path + ".tmp"
	conf := spec.Path + ".mke2fs.conf"
	defer os.Remove(conf)
	if err := os.WriteFile(conf, []byte(treeMkfsConf), 0o644); err != nil {
		return fmt.Errorf("write mke2fs config: %w", err)
	}
	err := b.fillTreeImage(ctx, tmp, conf, label, script, spec)
	if err == nil {
		err = os.Rename(tmp, spec.Path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// fillTreeImage makes the file system: mke2fs copies the tree, or, given a
// populating script, makes it empty and debugfs runs the script.
func (b *Builder) fillTreeImage(ctx context.Context, img, conf, label, script string, spec TreeImageSpec) error {
	if err := sparseFile(img, spec.SizeBytes); err != nil {
		return fmt.Errorf("create image: %w", err)
	}
	uuid := fsUUID(spec.Seed)
	args := []string{"-q", "-F", "-t", "ext4", "-L", label, "-U", uuid,
		"-E", "root_owner=0:0,hash_seed=" + uuid + ",nodiscard"}
	if script == "" {
		args = append(args, "-d", spec.Dir)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.cfg.MkfsExt4, append(args, img)...)
	cmd.Env = append(os.Environ(), fakeTime, "MKE2FS_CONFIG="+conf)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := tail(out.String(), 500)
		if ctx.Err() == nil && isNoSpace(msg) {
			return fmt.Errorf("%w: %d MiB is too small (mkfs.ext4: %s)", ErrTreeTooLarge, spec.SizeBytes>>20, msg)
		}
		return fmt.Errorf("mkfs.ext4: %w: %s", err, msg)
	}
	if script != "" {
		return b.runScript(ctx, img, script, spec.SizeBytes)
	}
	return b.stampTimes(ctx, img, spec.Dir)
}

// isNoSpace tells mke2fs's out-of-blocks or out-of-inodes failures apart.
func isNoSpace(msg string) bool {
	for _, s := range []string{"Could not allocate", "No free space", "No space left", "too small", "Could not find a free inode"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// stampTimes sets the access, change and creation time of every inode
// copied from dir to buildEpoch (nanoseconds zero) with one debugfs script:
// mke2fs copies the source's atime and ctime, which reading the tree and
// extracting it change. Modification times are the tree's own.
func (b *Builder) stampTimes(ctx context.Context, img, dir string) error {
	stamp := buildEpoch.UTC().Format("20060102150405")
	var script strings.Builder
	err := eachImagePath(dir, func(name string) {
		for _, f := range []string{"atime", "ctime", "crtime"} {
			fmt.Fprintf(&script, "sif \"%s\" %s %s\nsif \"%s\" %s_extra 0\n", name, f, stamp, name, f)
		}
	})
	if err == nil {
		err = b.runDebugfs(ctx, img, script.String())
	}
	if err != nil {
		return fmt.Errorf("stamp times: %w", err)
	}
	return nil
}

// sparseFile creates (or truncates) p as a hole of size bytes.
func sparseFile(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
