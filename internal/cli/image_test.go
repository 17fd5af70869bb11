package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/clienttest"
)

const webRef = "registry.example.com/team/web:1.4"

// newImageServer returns a fake holding image web (ready, job1) and
// alpine (pending, job2, never polled).
func newImageServer(t *testing.T) *clienttest.Server {
	t.Helper()
	srv := newServer(t)
	ctx := t.Context()
	c := client.New(srv.URL, clienttest.Token)
	r, err := c.Images().Enable(ctx, apiv1.EnableImageRequest{Ref: webRef, MemoryMiB: 1024, VCPUs: 2, Warmup: "npm ci",
		Env: map[string]string{"B": "2", "A": "1"}, Credentials: &apiv1.RegistryAuth{Username: "ci", Password: "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Images().WaitJob(ctx, r.Job.ID, time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Images().Enable(ctx, apiv1.EnableImageRequest{Ref: "alpine:3.20"}); err != nil {
		t.Fatal(err)
	}
	return srv
}

func failJobs(_ *testing.T, srv *clienttest.Server) {
	srv.ScriptImageJobs(clienttest.FailedImageSteps())
}

const readyWeb = "image web is ready\n" +
	"Ref:            " + webRef + "\n" +
	"Digest:         " + clienttest.ImageDigest + "\n" +
	"Base snapshot:  base-job1\n" +
	"Stages:         resolve 0.3s, pull 12.0s, rootfs 4.0s, chunks 1.5s, boot 0.9s, warmup 30.5s, snapshot 2.1s\n" +
	"Took:           51.3s\n" +
	"start a session from it with `engrams session create --image web`\n"

func TestImageEnable(t *testing.T) {
	t.Parallel()
	runTable(t, newServer, []cmdTest{
		{name: "progress and summary", args: []string{"image", "enable", webRef}, stdout: readyWeb,
			stderr: "image web: pending\n" +
				"image web: materializing resolve\n" +
				"image web: materializing pull\n" +
				"image web: materializing rootfs\n" +
				"image web: capturing warmup\n" +
				"image web: ready\n"},
		{name: "warm-up fails", args: []string{"image", "enable", "--warmup", "npm ci", webRef}, setup: failJobs, code: 1,
			stderr: "image web: pending\n" +
				"image web: materializing pull\n" +
				"image web: capturing warmup\n" +
				"image web: failed\n" +
				"warm-up output (last lines):\n" +
				"  npm ERR! code ENOENT\n" +
				"  npm ERR! missing package.json\n" +
				"error: enable of image web failed: warm-up exited with status 1\n" +
				"hint: fix the image or its --warmup and run `engrams image enable` again (a failed image is tried again); " +
				"see `engrams image jobs web`\n"},
		{name: "warm-up fails json", args: []string{"image", "enable", "--json", webRef}, setup: failJobs, code: 1,
			contains:   []string{`"state": "failed"`, `"output_tail": "npm ERR! code ENOENT\nnpm ERR! missing package.json\n"`},
			errContain: []string{"error: enable of image web failed"}},
		{name: "warned", args: []string{"image", "enable", webRef}, setup: func(_ *testing.T, srv *clienttest.Server) { srv.ScriptImageJobs(warnedSteps()) },
			stdout:     strings.Replace(readyWeb, "start a session", "warning: "+leftOutWarning+"\nstart a session", 1),
			errContain: []string{"image web: ready\n"}},
		{name: "no wait", args: []string{"image", "enable", "--no-wait", "--name", "w2", webRef},
			stdout: "image w2: enable job job1 is pending; follow it with `engrams image jobs w2`\n"},
		{name: "no wait json", args: []string{"image", "enable", "--no-wait", "--json", "node:22"},
			contains: []string{`"name": "node"`, `"job": {`, `"id": "job1"`, `"state": "pending"`}},
		{name: "json", args: []string{"--json", "image", "enable", webRef},
			contains:   []string{`"state": "ready"`, `"digest": "` + clienttest.ImageDigest + `"`, `"base_snapshot_id": "base-job1"`, `"warmup": 30500`},
			errContain: []string{"image web: capturing warmup\n"}},
		{name: "negative memory", args: []string{"image", "enable", "--memory", "-1", webRef}, code: 2,
			errContain: []string{"--memory, --vcpus and --disk must not be negative", "hint: see `engrams image enable --help`"}},
		{name: "short timeout", args: []string{"image", "enable", "--warmup-timeout", "500ms", webRef}, code: 2,
			errContain: []string{`--warmup-timeout "500ms": want a duration of at least 1s`}},
		{name: "bad stall", args: []string{"image", "enable", "--warmup-stall", "never", webRef}, code: 2,
			errContain: []string{`--warmup-stall "never"`}},
		{name: "bad env", args: []string{"image", "enable", "--env", "NOPE", webRef}, code: 2, errContain: []string{`--env "NOPE": want KEY=VALUE`}},
		{name: "password without user", args: []string{"image", "enable", "--registry-password-stdin", webRef}, stdin: "pw", code: 2,
			errContain: []string{"--registry-password-stdin needs --registry-user"}},
		{name: "user without password", args: []string{"image", "enable", "--registry-user", "ci", webRef}, code: 2,
			errContain: []string{"--registry-user needs --registry-password-stdin"}},
		{name: "password and token", args: []string{"image", "enable", "--registry-user", "ci", "--registry-password-stdin", "--registry-token-stdin", webRef},
			stdin: "pw", code: 2, errContain: []string{"use one of --registry-password-stdin and --registry-token-stdin"}},
		{name: "empty stdin", args: []string{"image", "enable", "--registry-token-stdin", webRef}, stdin: "\n", code: 2,
			errContain: []string{"no registry token on stdin"}},
		{name: "no ref", args: []string{"image", "enable"}, code: 2, errContain: []string{"accepts 1 arg(s)"}},
		{name: "help", args: []string{"image", "enable", "--help"},
			contains: []string{"--registry-password-stdin", "--warmup-stall", "Examples:", "base snapshot"}},
		{name: "session create help", args: []string{"session", "create", "--help"},
			contains: []string{"--image NAME ", "the NAME of an enabled image (see engrams image list;", "engrams image enable"}},
	})
}

// TestImageEnableRequest checks what enable sends, and that a secret read
// from stdin is sent and shown nowhere.
func TestImageEnableRequest(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  apiv1.EnableImageRequest
	}{
		{"everything", secret + "\r\n", []string{"--name", "w", "--env", "A=1", "--env", "B=x=y", "--memory", "2048", "--vcpus", "2",
			"--disk", "8", "--workdir", "/app", "--warmup", "npm ci", "--warmup-timeout", "20m", "--warmup-stall", "90.5s",
			"--registry-user", "ci", "--registry-password-stdin"},
			apiv1.EnableImageRequest{Ref: webRef, Name: "w", Env: map[string]string{"A": "1", "B": "x=y"}, MemoryMiB: 2048, VCPUs: 2,
				DiskGiB: 8, Workdir: "/app", Warmup: "npm ci", WarmupTimeoutS: 1200, WarmupStallS: 91,
				Credentials: &apiv1.RegistryAuth{Username: "ci", Password: secret}}},
		{"token", secret, []string{"--registry-token-stdin"},
			apiv1.EnableImageRequest{Ref: webRef, Credentials: &apiv1.RegistryAuth{Token: secret}}},
		{"anonymous", "", nil, apiv1.EnableImageRequest{Ref: webRef}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			got := run(t, srv, nil, tt.stdin, append(append([]string{"image", "enable", "--json"}, tt.args...), webRef)...)
			if got.code != 0 {
				t.Fatalf("code %d: %s", got.code, got.stderr)
			}
			sent, _ := json.Marshal(srv.EnableRequests())
			want, _ := json.Marshal([]apiv1.EnableImageRequest{tt.want})
			if string(sent) != string(want) {
				t.Errorf("sent %s\nwant %s", sent, want)
			}
			if strings.Contains(got.stdout+got.stderr, secret) {
				t.Errorf("secret shown:\nstdout: %s\nstderr: %s", got.stdout, got.stderr)
			}
		})
	}
}

func TestImageCommands(t *testing.T) {
	t.Parallel()
	runTable(t, newImageServer, []cmdTest{
		{name: "list", args: []string{"image", "list"},
			stdout: "NAME    STATE    REF                                DIGEST               MEMORY    VCPUS  DISK   LAST JOB        UPDATED\n" +
				"alpine  pending  alpine:3.20                        -                    512 MiB   1      4 GiB  enable pending  2026-11-30 06:00:00\n" +
				"web     ready    registry.example.com/team/web:1.4  sha256:5f2d4e6a8b0c  1024 MiB  2      4 GiB  enable ready    2026-11-30 06:00:00\n"},
		{name: "list json", args: []string{"image", "ls", "--json"}, contains: []string{`"name": "alpine"`, `"credentials": "ci@registry.example.com"`}},
		{name: "list all", args: []string{"image", "list", "--all"}, setup: disable("web"), contains: []string{"web     disabled"}},
		{name: "list hides disabled", args: []string{"image", "list"}, setup: disable("web"), contains: []string{"alpine"}},
		{name: "get", args: []string{"image", "get", "web"}, stdout: "Name:            web\n" +
			"ID:              img1\n" +
			"State:           ready\n" +
			"Ref:             " + webRef + "\n" +
			"Digest:          " + clienttest.ImageDigest + "\n" +
			"Credentials:     ci@registry.example.com\n" +
			"Base snapshot:   base-job1\n" +
			"Snapshot host:   qemu/tcg amd64\n" +
			"Cached on:       h1\n" +
			"Memory:          1024 MiB\n" +
			"vCPUs:           2\n" +
			"Disk:            4 GiB\n" +
			"Workdir:         /\n" +
			"User:            -\n" +
			"Libc:            glibc\n" +
			"Entrypoint:      -\n" +
			"Env:             A=1 B=2\n" +
			"Warm-up:         npm ci\n" +
			"Warm-up limits:  10m0s overall, 2m0s without output\n" +
			"Created:         2026-11-30 06:00:00\n" +
			"Updated:         2026-11-30 06:00:00\n" +
			"\nLast job:\n" +
			"ID    KIND    STATE  STAGE  PROGRESS  ATTEMPTS  CREATED              TOOK   ERROR\n" +
			"job1  enable  ready  -      -         1         2026-11-30 06:00:00  51.3s  -\n"},
		{name: "get failed", args: []string{"image", "get", "node"}, setup: enableFailed("node:22"),
			contains: []string{"State:           failed\n", "warm-up exited with status 1\n", "warm-up output (last lines):\n  npm ERR! code ENOENT\n"}},
		{name: "get json", args: []string{"--json", "image", "get", "web"}, contains: []string{`"base_snapshot_id": "base-job1"`, `"stages_ms": {`}},
		{name: "get unknown", args: []string{"image", "get", "nope"}, code: 1,
			errContain: []string{`get image nope: image "nope" not found (HTTP 404 not_found)`, "hint: list images with `engrams image list` (--all shows disabled ones)"}},
		{name: "jobs", args: []string{"image", "jobs", "alpine"},
			stdout: "ID    KIND    STATE    STAGE  PROGRESS  ATTEMPTS  CREATED              TOOK  ERROR\n" +
				"job2  enable  pending  -      -         0         2026-11-30 06:00:00  -     -\n"},
		{name: "jobs json", args: []string{"image", "jobs", "--json", "web"}, contains: []string{`"items": [`, `"kind": "enable"`}},
		{name: "jobs with a warning", args: []string{"image", "jobs", "deboot"}, setup: enableWarned("deboot:12"),
			stdout: "ID    KIND    STATE  STAGE  PROGRESS  ATTEMPTS  CREATED              TOOK   ERROR\n" +
				"job3  enable  ready  -      -         1         2026-11-30 06:00:00  51.3s  -\n" +
				"warning (job job3): " + leftOutWarning + "\n"},
		{name: "get with a warning", args: []string{"image", "get", "deboot"}, setup: enableWarned("deboot:12"),
			contains: []string{"\nLast job:\n", "job3  enable  ready", "\nwarning (job job3): " + leftOutWarning + "\n"}},
		{name: "jobs json with a warning", args: []string{"image", "jobs", "--json", "deboot"}, setup: enableWarned("deboot:12"),
			contains: []string{`"warnings": [`, `"left out 2 device nodes and 1 FIFO`}},
		{name: "disable", args: []string{"image", "disable", "web"}, stdout: "disabled image web (img1); sessions already running from it keep running\n"},
		{name: "disable json", args: []string{"image", "disable", "--json", "web"}, contains: []string{`"state": "disabled"`}},
		{name: "refresh", args: []string{"image", "refresh", "web"}, contains: []string{"image web is ready\n", "Base snapshot:  base-job3\n"},
			errContain: []string{"image web: pending\n", "image web: ready\n"}},
		{name: "refresh fails", args: []string{"image", "refresh", "web"}, setup: failJobs, code: 1,
			errContain: []string{"error: refresh of image web failed: warm-up exited with status 1\n", "hint: the image keeps its current base snapshot"}},
		{name: "refresh no wait", args: []string{"image", "refresh", "--no-wait", "web"},
			stdout: "image web: refresh job job3 is pending; follow it with `engrams image jobs web`\n"},
		{name: "refresh unknown", args: []string{"image", "refresh", "nope"}, code: 1, errContain: []string{"hint: list images"}},
		{name: "enable ready again", args: []string{"image", "enable", webRef}, stdout: readyWeb},
		{name: "enable name taken", args: []string{"image", "enable", "other.example.com/web:2"}, code: 1,
			errContain: []string{`error: enable image other.example.com/web:2: image name "web" is taken by ` + webRef, "(HTTP 409 conflict)",
				"hint: another image has that name"}},
		{name: "group help", args: []string{"image"}, contains: []string{"base snapshot", "enable", "refresh"}},
	})
}

func disable(name string) func(*testing.T, *clienttest.Server) {
	return func(t *testing.T, srv *clienttest.Server) {
		if _, err := client.New(srv.URL, clienttest.Token).Images().Disable(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
}

// enableFailed enables ref with a job that fails its warm-up and waits.
// leftOutWarning is what a job enabling a docker-imported debootstrap tree says.
const leftOutWarning = "left out 2 device nodes and 1 FIFO, never created from an image: /dev/console, /dev/null, /run/initctl; " +
	"the guest's /dev is devtmpfs, with the kernel's own device nodes"

// warnedSteps is a job that ends ready with leftOutWarning.
func warnedSteps() []apiv1.ImageJob {
	steps := clienttest.DefaultImageSteps()
	steps[len(steps)-1].Warnings = []string{leftOutWarning}
	return steps
}

// enableWarned enables ref through warnedSteps.
func enableWarned(ref string) func(*testing.T, *clienttest.Server) {
	return func(t *testing.T, srv *clienttest.Server) {
		srv.ScriptImageJobs(warnedSteps())
		c := client.New(srv.URL, clienttest.Token)
		r, err := c.Images().Enable(t.Context(), apiv1.EnableImageRequest{Ref: ref})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Images().WaitJob(t.Context(), r.Job.ID, time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func enableFailed(ref string) func(*testing.T, *clienttest.Server) {
	return func(t *testing.T, srv *clienttest.Server) {
		failJobs(t, srv)
		c := client.New(srv.URL, clienttest.Token)
		r, err := c.Images().Enable(t.Context(), apiv1.EnableImageRequest{Ref: ref})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Images().WaitJob(t.Context(), r.Job.ID, time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
	}
}
