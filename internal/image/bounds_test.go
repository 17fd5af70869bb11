package image

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
)

// diskUse is what a directory tree takes on disk: allocated bytes and inodes.
type diskUse struct {
	bytes  int64
	inodes int
}

// measureDisk sums the allocated blocks and counts the inodes below dir (entries
// removed meanwhile are skipped).
func measureDisk(dir string) diskUse {
	var u diskUse
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			u.bytes += st.Blocks * 512
		}
		u.inodes++
		return nil
	})
	return u
}

// diskSampler measures dir again and again until stopped and keeps the peak;
// past the bound it cancels the work it watches (so a pull that does not stop
// fails the test without filling the disk).
type diskSampler struct {
	mu      sync.Mutex
	peak    diskUse
	samples int
	stop    chan struct{}
	done    chan struct{}
}

func sampleDisk(dir string, bound diskUse, cancel context.CancelFunc) *diskSampler {
	s := &diskSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			t0 := time.Now()
			u := measureDisk(dir)
			pause := max(20*time.Millisecond, 3*time.Since(t0)) // a walk of a big tree costs: at most a quarter of the time
			s.mu.Lock()
			s.peak.bytes, s.peak.inodes = max(s.peak.bytes, u.bytes), max(s.peak.inodes, u.inodes)
			s.samples++
			s.mu.Unlock()
			if u.bytes > bound.bytes || u.inodes > bound.inodes {
				cancel()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(pause):
			}
		}
	}()
	return s
}

func (s *diskSampler) end() (diskUse, int) {
	close(s.stop)
	<-s.done
	return s.peak, s.samples
}

// boundsCase is a hostile image and what must stop it: which bound, and the disk
// use the coordinator's work dir stays within meanwhile.
type boundsCase struct {
	name  string
	img   func(t *testing.T) v1.Image
	limit string
	disk  diskUse
	gib   int // the root disk; 0: the default (4 GiB)
}

const mib = 1 << 20

func boundsCases() []boundsCase {
	bomb := func(k imagetest.BombKind) func(t *testing.T) v1.Image {
		return func(t *testing.T) v1.Image { return imagetest.Bomb(t, k, 16<<30) }
	}
	entries := func(k imagetest.EntriesKind) func(t *testing.T) v1.Image {
		return func(t *testing.T) v1.Image { return imagetest.ManyEntries(t, 2_000_000, k) }
	}
	small := diskUse{bytes: 1 * mib, inodes: 16}
	return []boundsCase{
		// A header past the tree bound: refused before a byte is written.
		{"gzip bomb, one 16 GiB file", bomb(imagetest.BombHugeFile), "TreeBytes", small, 0},
		// Files that each fit: stopped by the expansion bound, after about its
		// slack (256 MiB) plus 100 times the compressed bytes read.
		{"gzip bomb, 16 GiB of 64 MiB files", bomb(imagetest.BombZeroFiles), "Expansion", diskUse{bytes: 320 * mib, inodes: 16}, 0},
		{"zstd bomb, 16 GiB of 64 MiB files", bomb(imagetest.BombZstdZeroFiles), "Expansion", diskUse{bytes: 320 * mib, inodes: 16}, 0},
		// Zeros after the end of the archive: read, never written.
		{"gzip bomb, 16 GiB after the archive", bomb(imagetest.BombTrailingZeros), "Expansion", small, 0},
		// Nothing on disk: the entry count stops it at 1,000,001.
		{"2 million whiteouts", entries(imagetest.Whiteouts), "Entries", small, 0},
		// Empty files: stopped at the inodes of the root disk, 65,525 for this
		// 1 GiB one (262,133 for the default 4 GiB: four times the work); their
		// directories take a few MiB.
		{"2 million empty files", entries(imagetest.EmptyFiles), "Inodes", diskUse{bytes: 32 * mib, inodes: 65525 + 16}, 1},
	}
}

// TestMaterializeRefusesBombs is issue 13's acceptance: gzip and zstd bombs and
// layers of 2 million entries are refused early, with an error naming the bound,
// while the work dir's disk use stays within the case's bound (sampled every
// 20 ms, less often while a walk takes longer; past it the pull is canceled and
// the test fails); the work dir is removed. The subtests run one at a time so that the logged times to refuse are
// each pull's own.
func TestMaterializeRefusesBombs(t *testing.T) {
	t.Parallel()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	for i, tc := range boundsCases() {
		t.Run(tc.name, func(t *testing.T) {
			ref := reg.Ref("bomb/"+string(rune('a'+i)), "1")
			reg.Push(t, "bomb/"+string(rune('a'+i)), "1", tc.img(t))
			work := t.TempDir()
			m, err := New(Config{WorkDir: work}, Deps{
				Puller: oci.New(oci.Config{SkipOwnership: os.Geteuid() != 0}, oci.Deps{Dialer: netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})}),
				Imager: nopImager{}, Chunks: nopChunks{},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := sampleDisk(work, tc.disk, cancel)
			start := time.Now()
			_, err = m.Materialize(ctx, Request{Ref: ref, DiskGiB: tc.gib})
			took := time.Since(start)
			peak, samples := s.end()
			t.Logf("refused in %s; work dir peak %.1f MiB, %d inodes (%d samples): %v",
				took.Round(10*time.Millisecond), float64(peak.bytes)/mib, peak.inodes, samples, err)
			var lerr *oci.LimitError
			if !errors.As(err, &lerr) || lerr.Limit != tc.limit || !strings.Contains(err.Error(), "the image is refused") {
				t.Errorf("err %v, want the %s bound", err, tc.limit)
			}
			if peak.bytes > tc.disk.bytes || peak.inodes > tc.disk.inodes {
				t.Errorf("work dir peaked at %d bytes, %d inodes; the bound is %d bytes, %d inodes",
					peak.bytes, peak.inodes, tc.disk.bytes, tc.disk.inodes)
			}
			assertEmpty(t, work)
		})
	}
}
