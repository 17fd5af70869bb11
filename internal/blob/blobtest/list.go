package blobtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/blob"
)

// listKeySet has neighbours whose byte order differs from a naive
// directory walk ('-' and '.' sort before '/') and no key that is a
// segment prefix of another.
var listKeySet = []string{
	"A", "_u", "a-c", "a.b", "a/b", "a/c/d", "a0", "b",
	"chunks/ab-1", "chunks/ab/x", "chunks/abc", "chunks/abd/y", "chunks/b",
	"z/y/x/w",
}

func putShuffled(t *testing.T, s blob.Store, keys []string) {
	shuffled := slices.Clone(keys)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) {
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	})
	for _, k := range shuffled {
		mustPut(t, s, k, []byte(k)) // size = len(key), checked by List
	}
}

func testListOrder(t *testing.T, s blob.Store) {
	putShuffled(t, s, listKeySet)
	want := slices.Clone(listKeySet)
	slices.Sort(want) // byte-wise
	infos := listInfos(t, s, "")
	var got []string
	for _, i := range infos {
		got = append(got, i.Key)
		if i.Size != int64(len(i.Key)) {
			t.Errorf("List: %s has size %d, want %d", i.Key, i.Size, len(i.Key))
		}
		if i.ModTime.IsZero() {
			t.Errorf("List: %s has zero ModTime", i.Key)
		}
	}
	if !slices.Equal(want, got) {
		t.Errorf("List(\"\") =\n  %q\nwant\n  %q", got, want)
	}
}

func testListPrefix(t *testing.T, s blob.Store) {
	putShuffled(t, s, listKeySet)
	tests := []struct {
		prefix string
		want   []string
	}{
		{"chunks/ab", []string{"chunks/ab-1", "chunks/ab/x", "chunks/abc", "chunks/abd/y"}},
		{"chunks/ab/", []string{"chunks/ab/x"}},
		{"chunks/", []string{"chunks/ab-1", "chunks/ab/x", "chunks/abc", "chunks/abd/y", "chunks/b"}},
		{"chunks", []string{"chunks/ab-1", "chunks/ab/x", "chunks/abc", "chunks/abd/y", "chunks/b"}},
		{"chunks/abc", []string{"chunks/abc"}},
		{"a", []string{"a-c", "a.b", "a/b", "a/c/d", "a0"}},
		{"a/", []string{"a/b", "a/c/d"}},
		{"a/c", []string{"a/c/d"}},
		{"z/y/x/", []string{"z/y/x/w"}},
		{"z/y/x/w", []string{"z/y/x/w"}},
		{"A", []string{"A"}},
		{"nope", nil},
		{"a/c/d/", nil}, // under an object
		{"chunks/abc/", nil},
		{"/", nil}, // no valid key starts with these
		{"a//", nil},
		{"../", nil},
		{"./a", nil},
		{"a\x00", nil},
	}
	for _, tc := range tests {
		got := listKeys(t, s, tc.prefix)
		if !slices.Equal(tc.want, got) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func testListStop(t *testing.T, s blob.Store) {
	putShuffled(t, s, listKeySet)
	errStop := errors.New("stop here")
	calls := 0
	err := s.List(context.Background(), "", func(blob.Info) error {
		calls++
		if calls == 2 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Errorf("List = %v, want the callback's error", err)
	}
	if calls != 2 {
		t.Errorf("callback ran %d times after returning an error at call 2", calls)
	}
}
