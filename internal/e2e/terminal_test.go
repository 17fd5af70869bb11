package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// TestDashboardTerminal (issue 26): web/e2e/terminal.mjs opens the
// Terminal tab of a session of the default (busybox) image in Debian's
// chromium and types `ls /nonexistent; echo err >&2`: ls's error, the line
// written to stderr and a prompt show, and a coloured word is coloured.
func TestDashboardTerminal(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	chromium := requireBrowser(t)
	dir := shortTempDir(t)
	dev := startDev(t, filepath.Join(dir, "data"), "qemu")
	s, err := dev.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 128}}, true)
	if err != nil {
		t.Fatalf("create session: %v (dev log %s)", err, dev.stderr)
	}
	artifacts := artifactsDir(t, "terminal")
	cfg := map[string]string{"baseURL": dev.url, "loginURL": dev.loginLink(t), "sessionId": s.ID, "artifacts": artifacts}
	runBrowserScript(t, chromium, "terminal.mjs", cfg, 5*time.Minute)
	t.Logf("screenshots: %s", artifacts)
}
