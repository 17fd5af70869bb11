package pager

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/testutil"
)

const testCS = 64 << 10

// fakeSource serves chunks of data (the memory a manifest describes),
// counting reads per chunk; gate, when set, holds every read until closed.
type fakeSource struct {
	data  []byte
	reads []atomic.Int32
	gate  chan struct{}
	order []int
	mu    sync.Mutex
}

func (s *fakeSource) ReadChunk(ctx context.Context, m chunk.Manifest, idx int, dst []byte) error {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.reads[idx].Add(1)
	s.mu.Lock()
	s.order = append(s.order, idx)
	s.mu.Unlock()
	copy(dst, s.data[int64(idx)*m.ChunkSize:])
	return nil
}

// memory is n chunks of random data, zero where zero[i], and a manifest of
// it (fake hashes: the fake source does not check them).
func memory(n int, zero map[int]bool) ([]byte, chunk.Manifest) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := make([]byte, n*testCS)
	m := chunk.Manifest{Version: chunk.ManifestVersion, ChunkSize: testCS, Size: int64(len(data))}
	for i := range n {
		if zero[i] {
			m.Chunks = append(m.Chunks, chunk.ZeroRef())
			continue
		}
		b := data[i*testCS : (i+1)*testCS]
		for j := range b {
			b[j] = byte(rng.Uint32() | 1)
		}
		m.Chunks = append(m.Chunks, chunk.Ref{Hash: hexHash(b)})
	}
	return data, m
}

func hexHash(b []byte) string {
	s := sha256.Sum256(b)
	const hex = "0123456789abcdef"
	out := make([]byte, 64)
	for i, c := range s {
		out[2*i], out[2*i+1] = hex[c>>4], hex[c&15]
	}
	return string(out)
}

// mountPager mounts a pager in a temp dir, or skips (fails in CI) where
// FUSE cannot be mounted.
func mountPager(t *testing.T) *Pager {
	t.Helper()
	if err := Available(); err != nil {
		testutil.SkipOrFail(t, "no FUSE here: %v", err)
	}
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "mounting FUSE needs root")
	}
	p, err := Mount(Config{Mount: filepath.Join(t.TempDir(), "mnt")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// mapper is a child process mapping a file shared, as a VMM does: the
// test process serves the file system, and a fault it took itself could
// stall the Go runtime that serves it.
type mapper struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

// startMapper runs this test binary as a mapper of size bytes of path.
func startMapper(t *testing.T, path string, size int64) *mapper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMapperChild$")
	cmd.Env = append(os.Environ(), "PAGER_MAPPER="+path, "PAGER_MAPPER_SIZE="+strconv.FormatInt(size, 10))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	return &mapper{in: in, out: bufio.NewScanner(out)}
}

// do sends one command ("r OFF", "w OFF VAL", "sum") and returns the answer.
func (m *mapper) do(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(m.in, cmd); err != nil {
		t.Fatal(err)
	}
	if !m.out.Scan() {
		t.Fatalf("mapper: no answer to %q: %v", cmd, m.out.Err())
	}
	return m.out.Text()
}

// sink keeps the mapper's reads from being optimised away.
var sink byte

// TestMapperChild is the mapper process's body (run only by startMapper).
func TestMapperChild(t *testing.T) {
	path := os.Getenv("PAGER_MAPPER")
	if path == "" {
		t.Skip("the mapper child of the lazy memory tests")
	}
	size, _ := strconv.Atoi(os.Getenv("PAGER_MAPPER_SIZE"))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var off, val int
		switch w := strings.Fields(sc.Text()); w[0] {
		case "r":
			off, _ = strconv.Atoi(w[1])
			fmt.Println(mem[off])
		case "w":
			off, _ = strconv.Atoi(w[1])
			val, _ = strconv.Atoi(w[2])
			mem[off] = byte(val)
			fmt.Println("ok")
		case "sum":
			fmt.Println(hexHash(mem))
		case "touch", "fill": // one byte of every page; prints the time in ns
			start := time.Now()
			var x byte
			for i := 0; i < len(mem); i += 4096 {
				if w[0] == "fill" {
					mem[i] = byte(i>>12) | 1
				} else {
					x += mem[i]
				}
			}
			sink += x
			fmt.Println(time.Since(start).Nanoseconds())
		}
	}
	os.Exit(0)
}

// TestLazyMemoryMapped maps a served memory shared, as a VMM does: bytes
// come on first touch only, are right, writes are seen as changed chunks
// after Sync, the touch order is recorded, and Prefetch brings the rest.
func TestLazyMemoryMapped(t *testing.T) {
	t.Parallel()
	p := mountPager(t)
	const n = 16
	data, m := memory(n, map[int]bool{4: true, 5: true})
	src := &fakeSource{data: data, reads: make([]atomic.Int32, n)}
	f, err := p.Add("m1", filepath.Join(t.TempDir(), "m1.overlay"), m, src)
	if err != nil {
		t.Fatal(err)
	}
	mem := startMapper(t, f.Path(), m.Size)
	// Touch chunk 9, then 2, one byte each.
	if mem.do(t, fmt.Sprint("r ", 9*testCS+100)) != fmt.Sprint(data[9*testCS+100]) ||
		mem.do(t, fmt.Sprint("r ", 2*testCS+7)) != fmt.Sprint(data[2*testCS+7]) {
		t.Fatal("a touched byte differs")
	}
	if src.reads[0].Load() != 0 || src.reads[13].Load() != 0 {
		t.Fatal("chunks nobody touched were fetched")
	}
	// The kernel reads around a fault (its readahead window), so a
	// neighbour may come along; chunk 9 still comes before chunk 2.
	if tt := f.Touched(); !slices.Contains(tt, 9) || !slices.Contains(tt, 2) ||
		slices.Index(tt, 9) > slices.Index(tt, 2) || len(tt) > 6 {
		t.Fatalf("touched %v, want chunk 9 before chunk 2 and few others", tt)
	}
	// Write into chunk 3 and into zero chunk 5.
	mem.do(t, fmt.Sprint("w ", 3*testCS+1, " ", data[3*testCS+1]^0xff))
	mem.do(t, fmt.Sprint("w ", 5*testCS+2, " 42"))
	want := slices.Clone(data)
	want[3*testCS+1] ^= 0xff
	want[5*testCS+2] = 42
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	changed := f.Changed()
	for i := range n {
		if changed(i) != (i == 3 || i == 5) {
			t.Fatalf("chunk %d changed=%v", i, changed(i))
		}
	}
	if err := f.Prefetch(context.Background(), []int{12, 1}, 4); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := src.reads[i].Load(); got > 1 || (got == 0 && !m.Chunks[i].IsZero()) {
			t.Fatalf("chunk %d read %d times", i, got)
		}
	}
	if mem.do(t, "sum") != hexHash(want) {
		t.Fatal("mapped memory differs after prefetch")
	}
	buf := make([]byte, m.Size)
	if _, err := f.Overlay().ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("overlay differs")
	}
	st := f.Stats()
	if st.Chunks != n-2 || st.Local != n-2 || st.Dirty != 2 || st.Demand+st.Prefetch != int64(n-2) {
		t.Fatalf("stats %+v", st)
	}
	if err := f.Rebase(m); err != nil || f.Changed()(3) {
		t.Fatalf("rebase: %v", err)
	}
}

// TestLazyMemoryPrefetchOrder: the working set is fetched first, in its
// order, then the rest in address order.
func TestLazyMemoryPrefetchOrder(t *testing.T) {
	t.Parallel()
	p := mountPager(t)
	const n = 10
	data, m := memory(n, map[int]bool{6: true})
	src := &fakeSource{data: data, reads: make([]atomic.Int32, n)}
	f, err := p.Add("m2", filepath.Join(t.TempDir(), "ov"), m, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Prefetch(context.Background(), []int{8, 3, 8, 99, 6}, 1); err != nil {
		t.Fatal(err)
	}
	if want := []int{8, 3, 0, 1, 2, 4, 5, 7, 9}; !slices.Equal(src.order, want) {
		t.Fatalf("order %v, want %v", src.order, want)
	}
	if len(f.Touched()) != 0 {
		t.Fatalf("prefetch counted as touches: %v", f.Touched())
	}
}

// TestLazyMemoryRemove: a removed name is gone, and may come back as a
// new file with other content.
func TestLazyMemoryRemove(t *testing.T) {
	t.Parallel()
	p := mountPager(t)
	data, m := memory(2, nil)
	ov := filepath.Join(t.TempDir(), "ov")
	f, err := p.Add("m3", ov, m, &fakeSource{data: data, reads: make([]atomic.Int32, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Add("m3", ov, m, nil); err == nil {
		t.Fatal("a name served twice")
	}
	if _, err := p.Add("../x", ov, m, nil); err == nil {
		t.Fatal("a path taken as a name")
	}
	got, err := os.ReadFile(f.Path())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %v", err)
	}
	p.Remove("m3")
	if _, err := os.Stat(f.Path()); !os.IsNotExist(err) {
		t.Fatalf("removed file: %v", err)
	}
	if _, err := os.Stat(ov); !os.IsNotExist(err) {
		t.Fatalf("overlay kept: %v", err)
	}
	data2, m2 := memory(2, map[int]bool{0: true})
	if _, err := p.Add("m3", ov, m2, &fakeSource{data: data2, reads: make([]atomic.Int32, 2)}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(f.Path()); err != nil || !bytes.Equal(got, data2) {
		t.Fatalf("the new file reads the old content: %v", err)
	}
}
