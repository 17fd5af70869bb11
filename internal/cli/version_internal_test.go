package cli

import (
	"runtime/debug"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0a0b4b4c1d2e3f40"}, {Key: "vcs.time", Value: "2026-12-02T16:20:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "(devel)"},
		{"a tagged module", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: vcs}, "v1.2.3, go1.26.8"},
		{"a checkout with changes", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"(devel) commit 0a0b4b4c1d2e+changes of 2026-12-02T16:20:00Z, go1.26.8"},
	} {
		if got := buildVersion(tt.bi); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
