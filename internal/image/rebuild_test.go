package image_test

import (
	"context"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/netpolicy"
)

// TestRebuiltImageUploadsOnlyWhatChanged materializes Debian, then the same
// Debian with one more small layer (a rebuilt image): the second upload
// must be a small part of the root filesystem.
func TestRebuiltImageUploadsOnlyWhatChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two Debian root filesystems")
	}
	t.Parallel()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "team/deb", "1", imagetest.Debian(t))
	reg.Push(t, "team/deb", "2", imagetest.DebianPlus(t, map[string]string{"etc/engrams-rebuilt": "v2\n"}))
	bs, err := localdir.New(localdir.Config{Dir: t.TempDir()}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	m, done, err := image.NewForBlobStore(bs, t.TempDir(), netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	ctx := context.Background()
	var rootfsStart time.Time
	timed := func(stage string, done, _ int64) { // logs how long the root filesystem took
		switch {
		case stage == image.StageRootFS && done == 0:
			rootfsStart = time.Now()
		case stage == image.StageRootFS:
			t.Logf("root filesystem built in %s", time.Since(rootfsStart).Round(time.Millisecond))
		}
	}
	first, err := m.Materialize(ctx, image.Request{Ref: reg.Ref("team/deb", "1"), Progress: timed})
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.Materialize(ctx, image.Request{Ref: reg.Ref("team/deb", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if again.Upload.UploadedBytes != 0 || again.RootFS.Size != first.RootFS.Size {
		t.Fatalf("same digest again uploaded %d bytes", again.Upload.UploadedBytes)
	}
	second, err := m.Materialize(ctx, image.Request{Ref: reg.Ref("team/deb", "2"), Progress: timed})
	if err != nil {
		t.Fatal(err)
	}
	stored := nonZeroBytes(first.RootFS)
	ratio := float64(second.Upload.UploadedBytes) / float64(stored)
	t.Logf("first: %d MiB stored; rebuilt: %d MiB uploaded (%.1f%%), %d of %d chunks new",
		stored>>20, second.Upload.UploadedBytes>>20, 100*ratio, second.Upload.Uploaded, second.Upload.Chunks)
	if ratio > 0.10 {
		t.Fatalf("a rebuilt image with one small changed layer uploaded %.1f%% of the root filesystem", 100*ratio)
	}
}

func nonZeroBytes(m chunk.Manifest) int64 {
	var n int64
	for i, r := range m.Chunks {
		if !r.IsZero() {
			n += m.ChunkLen(i)
		}
	}
	return n
}
