package guest

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		base []string
		over map[string]string
		want []string
	}{
		{"nil", nil, nil, []string{}},
		{"base only", []string{"A=1", "B=2"}, nil, []string{"A=1", "B=2"}},
		{"override and add", []string{"A=1", "B=2"}, map[string]string{"B": "x", "C": "3", "AA": "0"}, []string{"A=1", "AA=0", "B=x", "C=3"}},
		{"value with =", []string{"A=1=2"}, map[string]string{"Z": "a=b"}, []string{"A=1=2", "Z=a=b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := mergeEnv(tt.base, tt.over); !slices.Equal(got, tt.want) {
				t.Errorf("mergeEnv = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseSignal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    unix.Signal
		wantErr bool
	}{
		{"TERM", unix.SIGTERM, false},
		{"SIGINT", unix.SIGINT, false},
		{"kill", unix.SIGKILL, false},
		{"9", unix.SIGKILL, false},
		{"", 0, true},
		{"0", 0, true},
		{"99", 0, true},
		{"NOPE", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseSignal(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseSignal(%q) = %v, %v", tt.in, got, err)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, path string
		wantErr    bool
	}{
		{"sh", "/nonexistent:/bin:/usr/bin", false},
		{"sh", "", false}, // default PATH
		{"./relative/with/slash", "", false},
		{"no-such-program-xyz", "/bin", true},
		{"sh", "/nonexistent", true},
	}
	for _, tt := range tests {
		t.Run(tt.file+"@"+tt.path, func(t *testing.T) {
			t.Parallel()
			_, err := lookPath(tt.file, tt.path)
			if (err != nil) != tt.wantErr {
				t.Errorf("lookPath(%q, %q) = %v", tt.file, tt.path, err)
			}
		})
	}
}
