package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

func seqEntries(seqs ...int64) []guestapi.OutboxEntry {
	var out []guestapi.OutboxEntry
	for _, s := range seqs {
		out = append(out, guestapi.OutboxEntry{Seq: s, ID: "id", Kind: "k"})
	}
	return out
}

// TestOutboxCrashStates starts from the on-disk states a crash can leave
// and checks a fresh daemon neither loses nor repeats an entry.
func TestOutboxCrashStates(t *testing.T) {
	t.Parallel()
	line := func(seq string) string {
		return `{"seq":` + seq + `,"id":"id","kind":"k","applied_at":"2026-01-01T00:00:00Z"}` + "\n"
	}
	tests := []struct {
		name        string
		applied     string // "" : no file
		journal     string
		wantApplied int64
		wantJournal string // after applying seqs 1..4
	}{
		{"fresh", "", "", 0, line("1") + line("2") + line("3") + line("4")},
		{"consistent", "2\n", line("1") + line("2"), 2, line("1") + line("2") + line("3") + line("4")},
		{"journal ahead of seq", "1\n", line("1") + line("2"), 2, line("1") + line("2") + line("3") + line("4")},
		{"torn last line", "2\n", line("1") + line("2") + `{"seq":3,"id`, 2, line("1") + line("2") + line("3") + line("4")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.applied != "" {
				if err := os.WriteFile(filepath.Join(dir, appliedFile), []byte(tt.applied), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.journal != "" {
				if err := os.WriteFile(filepath.Join(dir, journalFile), []byte(tt.journal), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			o := &outbox{dir: dir}
			if got, err := o.state(); err != nil || got != tt.wantApplied {
				t.Fatalf("state = %d, %v; want %d", got, err, tt.wantApplied)
			}
			if got, err := o.apply(seqEntries(1, 2, 3, 4)); err != nil || got != 4 {
				t.Fatalf("apply = %d, %v", got, err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, journalFile))
			if got := stripTimes(string(b)); got != stripTimes(tt.wantJournal) {
				t.Errorf("journal =\n%s\nwant\n%s", got, stripTimes(tt.wantJournal))
			}
			if got, err := (&outbox{dir: dir}).state(); err != nil || got != 4 {
				t.Errorf("a restarted daemon sees %d, %v; want 4", got, err)
			}
		})
	}
}

// stripTimes drops applied_at values, which differ per run.
func stripTimes(j string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(j), "\n") {
		if i := strings.Index(l, `,"applied_at"`); i >= 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func TestOutboxBadAppliedFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appliedFile), []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (&outbox{dir: dir}).apply(seqEntries(1)); err == nil || !strings.Contains(err.Error(), "applied seq") {
		t.Errorf("apply over a corrupt seq file = %v", err)
	}
}
