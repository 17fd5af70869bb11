package s3_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/engrams/engrams/internal/blob/s3"
)

// signedBy is a gofakes3 endpoint that records which access key signed
// each request (gofakes3 itself checks no signature).
type signedBy struct {
	next http.Handler
	mu   sync.Mutex
	keys map[string]bool
}

var credentialRe = regexp.MustCompile(`Credential=([^/]+)/`)

func (s *signedBy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := "anonymous"
	if m := credentialRe.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		key = m[1]
	}
	s.mu.Lock()
	s.keys[key] = true
	s.mu.Unlock()
	s.next.ServeHTTP(w, r)
}

func (s *signedBy) only() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []string
	for k := range s.keys {
		ks = append(ks, k)
	}
	return strings.Join(ks, ",")
}

// TestCredentialsChain: without keys in Config the store signs with the
// AWS chain: the environment first, then the shared credentials file;
// keys in Config win over both. Not parallel: it sets the process's
// environment.
func TestCredentialsChain(t *testing.T) {
	credFile := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credFile, []byte("[default]\naws_access_key_id = from-file\naws_secret_access_key = file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		cfgKeys [2]string
		want    string
	}{
		{"environment", map[string]string{"AWS_ACCESS_KEY_ID": "from-env", "AWS_SECRET_ACCESS_KEY": "env-secret"}, [2]string{}, "from-env"},
		{"shared file", map[string]string{"AWS_SHARED_CREDENTIALS_FILE": credFile}, [2]string{}, "from-file"},
		{"environment before file", map[string]string{"AWS_ACCESS_KEY_ID": "from-env", "AWS_SECRET_ACCESS_KEY": "env-secret",
			"AWS_SHARED_CREDENTIALS_FILE": credFile}, [2]string{}, "from-env"},
		{"flags win", map[string]string{"AWS_ACCESS_KEY_ID": "from-env", "AWS_SECRET_ACCESS_KEY": "env-secret"}, [2]string{"from-flags", "s"}, "from-flags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
				t.Setenv(k, tc.env[k])
			}
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", orNone(tc.env["AWS_SHARED_CREDENTIALS_FILE"], t))
			t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
			backend := s3mem.New()
			if err := backend.CreateBucket("creds"); err != nil {
				t.Fatal(err)
			}
			sb := &signedBy{next: gofakes3.New(backend).Server(), keys: map[string]bool{}}
			ts := httptest.NewServer(sb)
			defer ts.Close()
			st, err := s3.New(context.Background(), s3.Config{Endpoint: strings.TrimPrefix(ts.URL, "http://"), Bucket: "creds",
				AccessKey: tc.cfgKeys[0], SecretKey: tc.cfgKeys[1], PartSize: testPartSize}, s3.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Put(context.Background(), "k", strings.NewReader("v"), 1); err != nil {
				t.Fatal(err)
			}
			if got := sb.only(); got != tc.want {
				t.Fatalf("requests signed by %q, want %q", got, tc.want)
			}
		})
	}
}

// orNone is path, or a file that does not exist (so a developer's own
// ~/.aws/credentials is never read).
func orNone(path string, t *testing.T) string {
	if path != "" {
		return path
	}
	return filepath.Join(t.TempDir(), "none")
}
