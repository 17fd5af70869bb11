package e2e

import (
	"strings"
	"testing"
)

// TestDefaultImageWget (issue 26): the default image's busybox wget
// fetches a URL the session's allowlist names, in the forms people type
// (quiet to stdout, to a file, with a timeout), rather than dying with a
// segfault (exit 139).
func TestDefaultImageWget(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	k := startEgressRig(t)
	id := k.session(t, []string{"allowed.test:" + k.port})
	url := "http://allowed.test:" + k.port
	for _, tc := range []struct{ name, path, script string }{
		{"to stdout", "/a", "wget -q -O- " + url + "/a"},
		{"to a file", "/b", "cd /tmp && wget " + url + "/b && cat b"},
		{"with a timeout", "/c", "wget -T 20 -q -O- " + url + "/c"},
		{"with a long timeout option", "/d", "wget --timeout=20 -q -O- " + url + "/d"},
	} {
		if out, code := k.run(t, id, tc.script); code != 0 || !strings.Contains(out, "hello from allowed.test:"+k.port+tc.path) {
			t.Errorf("%s (%s): exit %d, %q", tc.name, tc.script, code, out)
		}
	}
}
