package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func logTo(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

func writeFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// TestSecretFlag: a secret comes from its flag or its -file flag (the
// trailing newline dropped, other whitespace kept); both, an empty file
// or a missing one are refused; a file others can read is warned of.
func TestSecretFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		value    string
		content  string // "" with mode 0: no file
		mode     os.FileMode
		want     string
		wantErr  string
		wantWarn bool
	}{
		{"flag", "s3cret", "", 0, "s3cret", "", false},
		{"file with newline", "", "s3cret\n", 0o600, "s3cret", "", false},
		{"file with CRLF", "", "s3cret\r\n", 0o600, "s3cret", "", false},
		{"inner spaces kept", "", " s3 cret \n", 0o600, " s3 cret ", "", false},
		{"file readable by others", "", "s3cret\n", 0o644, "s3cret", "", true},
		{"both", "s3cret", "other\n", 0o600, "", "both given", false},
		{"empty file", "", "\n", 0o600, "", "is empty", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := ""
			if tc.mode != 0 {
				file = writeFile(t, tc.content, tc.mode)
			}
			var logs bytes.Buffer
			got, err := secretFlag("cluster-secret", tc.value, file, logTo(&logs))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("secretFlag = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("secretFlag = %q, %v; want %q", got, err, tc.want)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "--cluster-secret-file is accessible to other users")
			if warned != tc.wantWarn {
				t.Fatalf("warned = %v, want %v:\n%s", warned, tc.wantWarn, logs.String())
			}
		})
	}
	if _, err := secretFlag("s3-secret-key", "", filepath.Join(t.TempDir(), "absent"), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a missing --s3-secret-key-file was accepted")
	}
}

// TestWarnAccessible: files and directories others may read or enter are
// warned of; private ones and missing ones are not.
func TestWarnAccessible(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		dir  bool
		mode os.FileMode // 0: missing
		warn bool
	}{
		{"private file", false, 0o600, false},
		{"group-readable file", false, 0o640, true},
		{"world-readable file", false, 0o644, true},
		{"private dir", true, 0o700, false},
		{"open dir", true, 0o755, true},
		{"missing", false, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "x")
			switch {
			case tc.mode == 0:
			case tc.dir:
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.mode != 0 {
				if err := os.Chmod(p, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			warnAccessible(logTo(&logs), "--data-dir", p)
			if warned := strings.Contains(logs.String(), "accessible to other users"); warned != tc.warn {
				t.Fatalf("warned = %v, want %v:\n%s", warned, tc.warn, logs.String())
			}
		})
	}
}

// TestServerRefusesAShortClusterSecret: on the flag or in its file, a
// secret under the minimum stops `engrams server` before it opens
// anything.
func TestServerRefusesAShortClusterSecret(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", minClusterSecret)
	cases := []struct {
		name, secret, file string
		wantErr            string
	}{
		{"short flag", "e2e-cluster-secret", "", "is 18 characters; use at least 32"},
		{"short file", "", "short\n", "is 5 characters; use at least 32"},
		{"long enough", long, "", "--database is required"}, // gets past the secret
		{"long enough file", "", long + "\n", "--database is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &serverFlags{secret: tc.secret, logLevel: "error", listen: "127.0.0.1:0"}
			if tc.file != "" {
				f.secretFile = writeFile(t, tc.file, 0o600)
			}
			err := f.run(t.Context(), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("run = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestLogFormat(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log, err := newLogger(&b, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "session_id", "s1")
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil || line["msg"] != "hello" || line["session_id"] != "s1" {
		t.Fatalf("json log line %q: %v", b.String(), err)
	}
	if _, err := newLogger(&b, "info", "yaml"); err == nil {
		t.Fatal("--log-format yaml accepted")
	}
}
