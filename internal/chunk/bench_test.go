package chunk

import (
	"cmp"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob/localdir"
)

// Benchmarks use a 1 GiB file (ENGRAMS_CHUNK_BENCH_BYTES overrides) of 2 MiB
// blocks: every fourth block written as zeros, the rest random.
func benchSize() int64 {
	if v, err := strconv.ParseInt(os.Getenv("ENGRAMS_CHUNK_BENCH_BYTES"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 1 << 30
}

func benchFile(b *testing.B) (string, int64) {
	b.Helper()
	size := benchSize()
	path := filepath.Join(b.TempDir(), "bench.img")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	block := make([]byte, 2<<20)
	for off, i := int64(0), 0; off < size; off, i = off+int64(len(block)), i+1 {
		n := min(int64(len(block)), size-off)
		clear(block)
		if i%4 != 0 {
			fillRand(rng, block[:n])
		}
		if _, err := f.Write(block[:n]); err != nil {
			b.Fatal(err)
		}
	}
	return path, size
}

// heapPeak samples the live heap every few milliseconds until stopped.
type heapPeak struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64 // heap objects, including garbage not yet collected
	live uint64 // heap marked live by a GC
}

func startHeapPeak() *heapPeak {
	h := &heapPeak{stop: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	h.done.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			h.peak = max(h.peak, sample[0].Value.Uint64())
			h.live = max(h.live, sample[1].Value.Uint64())
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	})
	return h
}

func (h *heapPeak) report(b *testing.B) {
	close(h.stop)
	h.done.Wait()
	b.ReportMetric(float64(h.peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(h.live)/(1<<20), "peak-live-MiB")
	if hwm := vmHWM(); hwm > 0 {
		b.ReportMetric(float64(hwm)/(1<<20), "process-peak-RSS-MiB")
	}
}

// vmHWM is the process's peak resident set (Linux), or 0.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func gbps(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e9 }

// sha256sumGBps times `sha256sum` on path (best of two runs), or 0 if absent.
func sha256sumGBps(b *testing.B, path string, size int64) float64 {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		return 0
	}
	var best time.Duration
	for range 2 {
		start := time.Now()
		if out, err := exec.Command("sha256sum", path).CombinedOutput(); err != nil {
			b.Fatalf("sha256sum: %v: %s", err, out)
		}
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
	}
	return gbps(size, best)
}

// warm reads the file once so every contender reads from the page cache.
func warm(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(io.Discard, f); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkChunker measures hashing plus zero detection (Scan: no upload) and
// reports sha256sum's throughput on the same page-cached file, timed in the
// same sub-benchmark, beside it.
func BenchmarkChunker(b *testing.B) {
	path, size := benchFile(b)
	warm(b, path)
	for _, tc := range []struct {
		name     string
		chunk    int64
		parallel int
	}{{"memory", MemoryChunkSize, 0}, {"disk", DiskChunkSize, 0}, {"memory-1worker", MemoryChunkSize, 1}} {
		b.Run(tc.name, func(b *testing.B) {
			s := newTestStore(b, Config{ChunkSize: tc.chunk, Parallel: cmp.Or(tc.parallel, DefaultParallel)}, Deps{Blob: newMemBlob()})
			sumGBps := sha256sumGBps(b, path, size)
			b.SetBytes(size)
			b.ReportAllocs()
			hp := startHeapPeak()
			start := time.Now()
			for b.Loop() {
				if _, _, err := s.Scan(context.Background(), path); err != nil {
					b.Fatal(err)
				}
			}
			own := gbps(size*int64(b.N), time.Since(start))
			hp.report(b)
			b.ReportMetric(own, "GB/s")
			if sumGBps > 0 {
				b.ReportMetric(sumGBps, "sha256sum-GB/s")
				b.ReportMetric(own/sumGBps, "x-sha256sum")
			}
		})
	}
}

func newLocalBlob(b *testing.B) *localdir.Store {
	b.Helper()
	bs, err := localdir.New(localdir.Config{Dir: b.TempDir()}, localdir.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	return bs
}

// BenchmarkPutFile uploads the file to a fresh local-directory blob store per
// iteration ("cold"), or re-puts it unchanged ("unchanged": nothing uploads).
func BenchmarkPutFile(b *testing.B) {
	path, size := benchFile(b)
	for _, comp := range []string{CompressionNone, CompressionZstd} {
		b.Run("cold-"+comp, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			hp := startHeapPeak()
			for b.Loop() {
				b.StopTimer()
				s := newTestStore(b, Config{ChunkSize: MemoryChunkSize, Compression: comp, Parallel: 8}, Deps{Blob: newLocalBlob(b)})
				b.StartTimer()
				if _, _, err := s.PutFile(context.Background(), path); err != nil {
					b.Fatal(err)
				}
			}
			hp.report(b)
		})
	}
	b.Run("unchanged", func(b *testing.B) {
		s := newTestStore(b, Config{ChunkSize: MemoryChunkSize, Parallel: 8}, Deps{Blob: newLocalBlob(b)})
		_, first, err := s.PutFile(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		var last PutStats
		for b.Loop() {
			if _, last, err = s.PutFile(context.Background(), path); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(last.StoredBytes)/float64(first.StoredBytes)*100, "%-of-first-upload")
	})
}

// BenchmarkRestore restores the file from a local-directory blob store
// without a cache ("cold") and from a warm cache.
func BenchmarkRestore(b *testing.B) {
	path, size := benchFile(b)
	for _, comp := range []string{CompressionNone, CompressionZstd} {
		for _, warm := range []bool{false, true} {
			name := comp + "-cold"
			if warm {
				name = comp + "-cached"
			}
			b.Run(name, func(b *testing.B) {
				deps := Deps{Blob: newLocalBlob(b)}
				if warm {
					c, err := NewCache(CacheConfig{Dir: b.TempDir(), MaxBytes: 2 * size}, CacheDeps{})
					if err != nil {
						b.Fatal(err)
					}
					deps.Cache = c
				}
				s := newTestStore(b, Config{ChunkSize: MemoryChunkSize, Compression: comp, Parallel: 8}, deps)
				m, _, err := s.PutFile(context.Background(), path)
				if err != nil {
					b.Fatal(err)
				}
				dst := filepath.Join(b.TempDir(), "restored")
				b.SetBytes(size)
				b.ReportAllocs()
				hp := startHeapPeak()
				for b.Loop() {
					if err := s.Restore(context.Background(), m, dst); err != nil {
						b.Fatal(err)
					}
				}
				hp.report(b)
			})
		}
	}
}
