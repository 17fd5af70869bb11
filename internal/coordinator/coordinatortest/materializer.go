package coordinatortest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/store"
)

// Materializer plays image.Materializer: each ref resolves to the digest in
// digests (a missing ref is oci.ErrNotFound); it counts materializations.
type Materializer struct {
	Mu      sync.Mutex
	Digests map[string]string
	Fail    map[string]error // ref -> Materialize error
	Flaky   int              // Resolve calls still to fail in transit
	Calls   int
	Auth    []oci.Credentials
}

func (f *Materializer) Resolve(_ context.Context, ref string, auth oci.Credentials) (oci.Resolved, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Auth = append(f.Auth, auth)
	if f.Flaky > 0 {
		f.Flaky--
		return oci.Resolved{}, fmt.Errorf("resolve %s: connection reset by peer", ref)
	}
	d, ok := f.Digests[ref]
	if !ok {
		return oci.Resolved{}, fmt.Errorf("resolve %s: %w", ref, oci.ErrNotFound)
	}
	return oci.Resolved{Repository: "reg/app", Digest: d, Config: oci.ImageConfig{WorkingDir: "/work"}}, nil
}

func (f *Materializer) Materialize(_ context.Context, req image.Request) (image.Result, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Calls++
	if err := f.Fail[req.Ref]; err != nil {
		return image.Result{}, err
	}
	req.Progress(image.StagePull, 5, 10)
	d := req.Ref[strings.LastIndexByte(req.Ref, '@')+1:]
	return image.Result{Repository: "reg/app", Digest: d, Libc: image.LibcMusl,
		Config: oci.ImageConfig{Env: []string{"PATH=/usr/bin:/bin", "LANG=C"}, WorkingDir: "/work"},
		RootFS: chunk.Manifest{Version: 2, ChunkSize: chunk.DiskChunkSize, Size: 1 << 30}}, nil
}

// Sealer is a reversible fake AEAD that checks associated data.
type Sealer struct{}

// Seal prefixes the plaintext with the associated data.
func (Sealer) Seal(p, ad []byte) ([]byte, error) { return append(append([]byte{}, ad...), p...), nil }

// Open checks and strips the associated data.
func (Sealer) Open(c, ad []byte) ([]byte, error) {
	if !strings.HasPrefix(string(c), string(ad)) {
		return nil, errors.New("associated data differs")
	}
	return c[len(ad):], nil
}

// WaitJob waits (10 s at most) until image job id is ready or failed.
func WaitJob(t testing.TB, st store.Store, id domain.ImageJobID) domain.ImageJob {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := st.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !j.State.Active() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s (%s)", id, j.State, j.Stage)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
