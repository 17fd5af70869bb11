package vmimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// ErrTreeTooLarge is returned (wrapped) by TreeImage when the tree does not
// fit in the requested size; callers can ask for a larger disk.
var ErrTreeTooLarge = errors.New("tree does not fit in the filesystem")

// TreeImageSpec says which tree to turn into which ext4 image.
type TreeImageSpec struct {
	Dir       string // flattened tree (as oci.Puller.Pull produces); read, never modified
	Path      string // image file to create; replaced atomically
	SizeBytes int64  // virtual size of the (sparse) image
	Seed      string // e.g. the image digest: the UUID and directory hash seed derive from it
	Label     string // filesystem label; default "root"
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
// images do, on one mke2fs version and on the tree being listed in the same
// order (mke2fs 1.47.0 copies entries in readdir order).
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
	tmp := spec.Path + ".tmp"
	conf := spec.Path + ".mke2fs.conf"
	defer os.Remove(conf)
	if err := os.WriteFile(conf, []byte(treeMkfsConf), 0o644); err != nil {
		return fmt.Errorf("write mke2fs config: %w", err)
	}
	err := b.fillTreeImage(ctx, tmp, conf, label, spec)
	if err == nil {
		err = os.Rename(tmp, spec.Path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func (b *Builder) fillTreeImage(ctx context.Context, img, conf, label string, spec TreeImageSpec) error {
	if err := sparseFile(img, spec.SizeBytes); err != nil {
		return fmt.Errorf("create image: %w", err)
	}
	uuid := fsUUID(spec.Seed)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.cfg.MkfsExt4, "-q", "-F", "-t", "ext4", "-L", label, "-U", uuid,
		"-E", "root_owner=0:0,hash_seed="+uuid+",nodiscard", "-d", spec.Dir, img)
	cmd.Env = append(os.Environ(), fakeTime, "MKE2FS_CONFIG="+conf)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := tail(out.String(), 500)
		if ctx.Err() == nil && isNoSpace(msg) {
			return fmt.Errorf("%w: %d MiB is too small (mkfs.ext4: %s)", ErrTreeTooLarge, spec.SizeBytes>>20, msg)
		}
		return fmt.Errorf("mkfs.ext4: %w: %s", err, msg)
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
