package blobtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/engrams/engrams/internal/blob"
)

// BenchObjectSize is the object size Bench measures (a disk chunk).
const BenchObjectSize = 4 * mib

// Bench measures Put and Get throughput of 4 MiB objects on s.
func Bench(b *testing.B, s blob.Store) {
	data := make([]byte, BenchObjectSize)
	rand.NewChaCha8([32]byte{1}).Read(data)
	ctx := context.Background()
	b.Run("Put4MiB", func(b *testing.B) {
		b.SetBytes(BenchObjectSize)
		i := 0
		for b.Loop() {
			key := fmt.Sprintf("bench/put/%d", i%8)
			i++
			if err := s.Put(ctx, key, bytes.NewReader(data), BenchObjectSize); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get4MiB", func(b *testing.B) {
		if err := s.Put(ctx, "bench/get", bytes.NewReader(data), BenchObjectSize); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(BenchObjectSize)
		for b.Loop() {
			rc, err := s.Get(ctx, "bench/get")
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != BenchObjectSize {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}
