package adapter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
)

// The adapter's own parts; internal/guest runs it through the daemon.

var shellSpec = harness.BuiltinSpec{Name: harness.BuiltinShell}

// stageHarness assembles a built-in harness into a new directory.
func stageHarness(t *testing.T, spec harness.BuiltinSpec, cacheDir string) string {
	t.Helper()
	b, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: cacheDir}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := b.StageBuiltin(context.Background(), spec, dir); err != nil {
		t.Fatalf("stage %s: %v", spec.Name, err)
	}
	return dir
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fixedGateway is a gateway listening at its URL.
type fixedGateway string

func (g fixedGateway) Listen(string) error   { return nil }
func (g fixedGateway) Serve(context.Context) {}
func (g fixedGateway) URL() (string, error)  { return string(g), nil }

func TestProbeHarness(t *testing.T) {
	t.Parallel()
	shell := stageHarness(t, harness.BuiltinSpec{Name: harness.BuiltinShell}, "")
	notExec := stageHarness(t, harness.BuiltinSpec{Name: harness.BuiltinShell}, "")
	if err := os.Chmod(filepath.Join(notExec, harness.ShellEntrypoint), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := stageHarness(t, harness.BuiltinSpec{Name: harness.BuiltinShell}, "")
	if err := os.Remove(filepath.Join(missing, harness.ShellEntrypoint)); err != nil {
		t.Fatal(err)
	}
	invalid := t.TempDir()
	if err := os.WriteFile(filepath.Join(invalid, guestapi.HarnessDescriptorFile), []byte(`{"format":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, state, errText string
	}{
		{"ready", shell, guestapi.HarnessReady, ""},
		{"no bundle", t.TempDir(), guestapi.HarnessNone, ""},
		{"no dir", filepath.Join(t.TempDir(), "absent"), guestapi.HarnessNone, ""},
		{"invalid descriptor", invalid, guestapi.HarnessFailed, "invalid harness descriptor"},
		{"entrypoint not executable", notExec, guestapi.HarnessFailed, "not an executable"},
		{"entrypoint missing", missing, guestapi.HarnessFailed, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, st := probeHarness(tt.dir)
			if st.State != tt.state || !strings.Contains(st.Error, tt.errText) || (tt.errText == "") != (st.Error == "") {
				t.Errorf("probe = %+v, want state %s error %q", st, tt.state, tt.errText)
			}
		})
	}
}

func TestHarnessEnv(t *testing.T) {
	t.Parallel()
	a := &Adapter{cfg: Config{HarnessHome: "/state/home", Env: []string{"PATH=/bin", "HOME=/root", "TERM=xterm", "SESSION=s", "ANTHROPIC_API_KEY=from-image"}}}
	d := guestapi.HarnessDescriptor{Credentials: []guestapi.HarnessCredential{
		{Kind: "anthropic_api_key", Env: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"},
		{Kind: "openai_api_key", Env: "OPENAI_API_KEY"},
	}}
	tests := []struct {
		name    string
		p       guestapi.PromptPayload
		want    []string
		missing []string
	}{
		{"placeholder", guestapi.PromptPayload{Credentials: map[string]string{"anthropic_api_key": "ph-1"}}, []string{
			"PATH=/bin", "HOME=/state/home", "TERM=xterm", "SESSION=s", "ANTHROPIC_API_KEY=ph-1",
			"ANTHROPIC_BASE_URL=http://127.0.0.1:4780/anthropic_api_key", "DISABLE_TELEMETRY=1", "CODEX_DISABLE_UPDATE_CHECK=1",
		}, []string{"OPENAI_API_KEY"}},
		{"no credential", guestapi.PromptPayload{Env: map[string]string{"SESSION": "p", "EXTRA": "1", "HOME": "/elsewhere"}}, []string{
			"SESSION=p", "EXTRA=1", "HOME=/state/home", "ANTHROPIC_BASE_URL=http://127.0.0.1:4780/anthropic_api_key",
		}, []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := a.harnessEnv(d, tt.p, "http://127.0.0.1:4780")
			seen := map[string]int{}
			for _, kv := range env {
				k, _, _ := strings.Cut(kv, "=")
				seen[k]++
				if seen[k] > 1 {
					t.Errorf("%s set twice: %q", k, env)
				}
			}
			for _, w := range tt.want {
				if !slices.Contains(env, w) {
					t.Errorf("env lacks %s: %q", w, env)
				}
			}
			for _, m := range tt.missing {
				if seen[m] > 0 {
					t.Errorf("env has %s: %q", m, env)
				}
			}
		})
	}
}

func TestPrepareModelsAndModes(t *testing.T) {
	t.Parallel()
	bundle := func(models, modes []string) string {
		dir := stageHarness(t, shellSpec, "")
		d, err := guestapi.LoadHarnessDescriptor(dir)
		if err != nil {
			t.Fatal(err)
		}
		d.Models, d.Modes = models, modes
		b, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, guestapi.HarnessDescriptorFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	strict := bundle([]string{"m1", "m2"}, []string{"a", "b"})
	anyModel := bundle([]string{"m1", guestapi.AnyModel}, nil)
	tests := []struct {
		name, dir, model, mode string
		wantModel, wantMode    string
		bad                    string
	}{
		{"defaults", strict, "", "", "m1", "a", ""},
		{"listed", strict, "m2", "b", "m2", "b", ""},
		{"unlisted model", strict, "m3", "", "", "", "model \"m3\""},
		{"unlisted mode", strict, "", "c", "", "", "mode \"c\""},
		{"any model", anyModel, "m9", "whatever", "m9", "whatever", ""},
		{"the wildcard itself", anyModel, guestapi.AnyModel, "", "", "", "model \"*\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := fixedGateway("http://127.0.0.1:4780")
			a := New(Config{WorkDir: t.TempDir(), HarnessDir: tt.dir, HarnessHome: "/h"}, Deps{Logger: slogDiscard(), Gateway: gw})
			q := &queuedPrompt{seq: 1, payload: guestapi.PromptPayload{Turn: "t", Text: "x", Model: tt.model, Mode: tt.mode}}
			run, bad := a.prepare(q, nil)
			switch {
			case tt.bad != "" && (bad == nil || bad.Kind != guestapi.ErrorBadPrompt || !strings.Contains(bad.Message, tt.bad)):
				t.Errorf("prepare = %+v, want bad_prompt with %q", bad, tt.bad)
			case tt.bad == "" && bad != nil:
				t.Errorf("prepare refused: %+v", bad)
			case tt.bad == "" && (run.model != tt.wantModel || run.mode != tt.wantMode):
				t.Errorf("model %q mode %q, want %q %q", run.model, run.mode, tt.wantModel, tt.wantMode)
			}
		})
	}
}

func TestKillLeftover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		sameTime bool
	}{{"left by a dead daemon", true}, {"pid reused", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
			start := procStart(cmd.Process.Pid)
			if !tc.sameTime {
				start += "1"
			}
			p := filepath.Join(t.TempDir(), harnessPid)
			if err := os.WriteFile(p, []byte(fmt.Sprintf("%d %s\n", cmd.Process.Pid, start)), 0o600); err != nil {
				t.Fatal(err)
			}
			killLeftover(p, slogDiscard())
			select {
			case <-done:
				if !tc.sameTime {
					t.Error("killed a process that only shares the pid")
				}
				done <- nil
			case <-time.After(300 * time.Millisecond):
				if tc.sameTime {
					t.Error("the leftover harness still runs")
				}
			}
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("pid file left: %v", err)
			}
		})
	}
}
