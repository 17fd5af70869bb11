package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name    string
		job     apiv1.ImageJob
		elapsed time.Duration
		frame   int
		want    string
	}{
		{"bytes", apiv1.ImageJob{State: "materializing", Stage: "pull", BytesDone: 81 * mib, BytesTotal: 180 * mib}, 0, 0,
			"materializing pull  [=========>          ]  45% 81.0/180.0 MiB"},
		{"all bytes", apiv1.ImageJob{State: "materializing", Stage: "pull", BytesDone: 180 * mib, BytesTotal: 180 * mib}, 0, 0,
			"materializing pull  [====================] 100% 180.0/180.0 MiB"},
		{"no bytes yet", apiv1.ImageJob{State: "materializing", Stage: "rootfs", BytesTotal: 4 << 30}, 0, 0,
			"materializing rootfs  [>                   ]   0% 0.0/4.0 GiB"},
		{"more than total", apiv1.ImageJob{State: "materializing", Stage: "chunks", BytesDone: 700, BytesTotal: 500}, 0, 0,
			"materializing chunks  [====================] 100% 700/500 B"},
		{"no total: spinner", apiv1.ImageJob{State: "capturing", Stage: "warmup"}, 12400 * time.Millisecond, 1,
			"capturing warmup  / 12s"},
		{"spinner wraps", apiv1.ImageJob{State: "pending"}, 0, 7, `pending  \ 0s`},
		{"ready", apiv1.ImageJob{State: "ready", Stage: "snapshot", BytesDone: 1, BytesTotal: 2}, time.Hour, 0, "ready"},
		{"failed", apiv1.ImageJob{State: "failed"}, 0, 0, "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := progressLine(tt.job, tt.elapsed, tt.frame); got != tt.want {
				t.Errorf("progressLine = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestProgressSequence feeds a sequence of polled job states to a terminal
// and a non-terminal progress display.
func TestProgressSequence(t *testing.T) {
	t.Parallel()
	jobs := []apiv1.ImageJob{
		{State: "pending"},
		{State: "materializing", Stage: "pull", BytesDone: 1 << 20, BytesTotal: 4 << 20},
		{State: "materializing", Stage: "pull", BytesDone: 4 << 20, BytesTotal: 4 << 20},
		{State: "capturing", Stage: "warmup"},
		{State: "capturing", Stage: "warmup"},
		{State: "ready"},
	}
	tests := []struct {
		name string
		tty  bool
		want string
	}{
		{"terminal", true, "\rpending  | 0s\x1b[K" +
			"\rmaterializing pull  [=====>              ]  25% 1.0/4.0 MiB\x1b[K" +
			"\rmaterializing pull  [====================] 100% 4.0/4.0 MiB\x1b[K" +
			"\rcapturing warmup  \\ 0s\x1b[K" +
			"\rcapturing warmup  | 5s\x1b[K" +
			"\rready\x1b[K\n"},
		{"pipe", false, "image web: pending\n" +
			"image web: materializing pull\n" +
			"image web: capturing warmup\n" +
			"image web: ready\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
			p := &progress{w: &buf, tty: tt.tty, name: "web", now: func() time.Time { return now }}
			for _, j := range jobs {
				p.update(j)
				now = now.Add(5 * time.Second)
			}
			p.end()
			if got := buf.String(); got != tt.want {
				t.Errorf("output:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}

func TestStageTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ms         map[string]int64
		want, took string
	}{
		{map[string]int64{"warmup": 125_000, "zeta": 1, "pull": 1500, "alpha": 20, "resolve": 300},
			"resolve 0.3s, pull 1.5s, warmup 2m5s, alpha 0.0s, zeta 0.0s", "2m7s"},
		{nil, "", ""},
	}
	for _, tt := range tests {
		if got := stageTimes(tt.ms); got != tt.want {
			t.Errorf("stageTimes(%v) = %q, want %q", tt.ms, got, tt.want)
		}
		if got := totalTime(tt.ms); got != tt.took {
			t.Errorf("totalTime(%v) = %q, want %q", tt.ms, got, tt.took)
		}
	}
	if got := strings.TrimSpace(byteProgress(3<<30, 5<<40)); got != "0.0/5.0 TiB" {
		t.Errorf("byteProgress TiB = %q", got)
	}
}
