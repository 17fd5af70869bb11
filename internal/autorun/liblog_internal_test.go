package autorun

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestFloorHandler: a library's lines below the floor are dropped, at or
// above it kept, with the attributes and groups they were given.
func TestFloorHandler(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		floor slog.Level
		want  []string
	}{
		{"warn", slog.LevelWarn, []string{"level=WARN msg=w part=dbos g.k=v", "level=ERROR msg=e part=dbos g.k=v"}},
		{"debug", slog.LevelDebug, []string{"level=DEBUG msg=d part=dbos g.k=v", "level=INFO msg=i part=dbos g.k=v", "level=WARN msg=w part=dbos g.k=v", "level=ERROR msg=e part=dbos g.k=v"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			base := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}})
			log := slog.New(floorHandler{h: base, min: tt.floor}).With("part", "dbos").WithGroup("g")
			log.Debug("d", "k", "v")
			log.Info("i", "k", "v")
			log.Warn("w", "k", "v")
			log.Error("e", "k", "v")
			if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
