package pager

import (
	"errors"
	"slices"
	"testing"
)

func TestWorkingSetRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		idxs   []int
		chunks int
		err    bool
	}{
		{"empty", nil, 10, false},
		{"ascending", []int{0, 1, 2, 3, 9}, 10, false},
		{"any order", []int{7, 2, 9, 0, 5}, 10, false},
		{"out of range", []int{1, 10}, 10, true},
		{"twice", []int{3, 4, 3}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeWorkingSet(EncodeWorkingSet(tc.idxs), tc.chunks)
			if tc.err {
				if !errors.Is(err, ErrBadWorkingSet) {
					t.Fatalf("got %v, %v; want ErrBadWorkingSet", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.idxs) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.idxs)
			}
		})
	}
	if _, err := DecodeWorkingSet([]byte("nope"), 4); !errors.Is(err, ErrBadWorkingSet) {
		t.Fatalf("no magic: %v", err)
	}
	if _, err := DecodeWorkingSet(append([]byte(wsMagic), 0xff), 4); !errors.Is(err, ErrBadWorkingSet) {
		t.Fatalf("truncated varint: %v", err)
	}
}

// FuzzDecodeWorkingSet: any bytes decode to in-range distinct indexes or
// an ErrBadWorkingSet, never a panic, and what decodes re-encodes the same.
func FuzzDecodeWorkingSet(f *testing.F) {
	f.Add(EncodeWorkingSet([]int{0, 5, 3, 100}), 200)
	f.Add([]byte(wsMagic), 1)
	f.Add(append([]byte(wsMagic), 0x80, 0x80, 0x80), 50)
	f.Fuzz(func(t *testing.T, b []byte, chunks int) {
		chunks = min(max(chunks, 0), 1<<20)
		got, err := DecodeWorkingSet(b, chunks)
		if err != nil {
			if !errors.Is(err, ErrBadWorkingSet) {
				t.Fatalf("error %v is not ErrBadWorkingSet", err)
			}
			return
		}
		seen := map[int]bool{}
		for _, i := range got {
			if i < 0 || i >= chunks || seen[i] {
				t.Fatalf("bad index %d of %d", i, chunks)
			}
			seen[i] = true
		}
		again, err := DecodeWorkingSet(EncodeWorkingSet(got), chunks)
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("re-encode: %v %v", again, err)
		}
	})
}
