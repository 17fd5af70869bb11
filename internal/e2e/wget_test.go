package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
)

// TestDefaultImageWget (issue 26): the default root's wget fetches a URL
// the session's allowlist names, in the forms people type, rather than
// dying with a segfault (exit 139): Debian's busybox wget segfaults on -T,
// so the root's wget (on PATH, and a function in login shells) runs it
// under timeout instead.
func TestDefaultImageWget(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	k := startEgressRig(t)
	id := k.session(t, []string{"allowed.test:" + k.port})
	url := "http://allowed.test:" + k.port
	for _, tc := range []struct {
		name, path string
		argv       []string
	}{
		{"to stdout", "/a", []string{"sh", "-c", "wget -q -O- " + url + "/a"}},
		{"to a file", "/b", []string{"sh", "-c", "cd /tmp && wget " + url + "/b && cat b"}},
		{"with -T in a login shell", "/c", []string{"sh", "-l", "-c", "wget -T 20 -q -O- " + url + "/c"}},
		{"with --timeout in a login shell", "/d", []string{"sh", "-l", "-c", "wget --timeout=20 -q -O- " + url + "/d"}},
		{"with -T, run without a shell", "/e", []string{"wget", "-T", "20", "-q", "-O-", url + "/e"}},
	} {
		var out, errb bytes.Buffer
		code, err := k.c.Sessions().Exec(context.Background(), id, apiv1.ExecRequest{Argv: tc.argv, TimeoutMS: 60000}, &out, &errb)
		if err != nil || code != 0 || !strings.Contains(out.String(), "hello from allowed.test:"+k.port+tc.path) {
			t.Errorf("%s (%q): exit %d %v, %q %q", tc.name, tc.argv, code, err, out.String(), errb.String())
		}
	}
}
