package modeltest_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/modeltest"
)

// TestFirstAssistantEventBaseline measures, for each CLI run directly on
// this host against the scripted server, the time from process start to its
// first assistant event (claude: the first "assistant" line; codex: the
// first item.* line of an agent item). It is the baseline the engrams
// benchmark compares with. Gated by ENGRAMS_BENCH=1; not parallel, so that
// no other test shares the cores while it measures.
func TestFirstAssistantEventBaseline(t *testing.T) {
	if os.Getenv("ENGRAMS_BENCH") != "1" {
		t.Skip("set ENGRAMS_BENCH=1 to measure")
	}
	claude, codex := modeltest.RequireCLIs(t)
	const runs = 7
	script := []modeltest.Turn{{Name: "hello", Text: "Hello from the scripted model."}}

	tests := []struct {
		name  string
		cmd   func(ctx context.Context, srv *modeltest.Server, repo string) *exec.Cmd
		first func(l modeltest.Line) bool
	}{
		{
			name: "claude",
			cmd: func(ctx context.Context, srv *modeltest.Server, repo string) *exec.Cmd {
				return claudeCmd(ctx, claude, repo, modeltest.ClaudeEnv(t.TempDir(), srv.URL(), testKey),
					"-p", "say hello", "--output-format", "stream-json", "--verbose")
			},
			first: func(l modeltest.Line) bool { return l.Type == "assistant" },
		},
		{
			name: "codex",
			cmd: func(ctx context.Context, srv *modeltest.Server, repo string) *exec.Cmd {
				env, err := modeltest.CodexEnv(t.TempDir(), t.TempDir(), srv.URL()+"/v1", testKey)
				if err != nil {
					t.Fatal(err)
				}
				return codexCmd(ctx, codex, repo, env, "exec", "--json", "say hello")
			},
			first: func(l modeltest.Line) bool {
				return (l.Type == "item.started" || l.Type == "item.completed") && itemType(l) != "error"
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := modeltest.Start(t, modeltest.Config{APIKey: testKey, Script: script})
			repo := gitRepo(t)
			var first, request, total []time.Duration
			for i := 0; i < runs; i++ {
				seen := len(srv.ModelRequests())
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				run, err := modeltest.RunJSONL(ctx, tt.cmd(ctx, srv, repo), nil)
				cancel()
				if err != nil || run.ExitCode != 0 {
					t.Fatalf("%s run %d: exit %d, %v\n%s", tt.name, i, run.ExitCode, err, run.Output())
				}
				l, ok := run.First(tt.first)
				if !ok {
					t.Fatalf("%s run %d: no assistant event in %v", tt.name, i, run.Types())
				}
				first = append(first, l.At)
				total = append(total, run.Duration)
				if reqs := srv.ModelRequests(); len(reqs) > seen {
					request = append(request, reqs[seen].Received.Sub(run.Started))
				}
			}
			t.Logf("%s over %d runs: first assistant event median %v p95 %v (min %v max %v); first model request received median %v; process total median %v; samples %v",
				tt.name, runs, percentile(first, 50), percentile(first, 95), slices.Min(first), slices.Max(first),
				percentile(request, 50), percentile(total, 50), first)
		})
	}
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}
