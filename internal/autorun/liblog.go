package autorun

import (
	"context"
	"log/slog"
)

// floorHandler passes on only records at or above min: what a library
// logs (DBOS's own lines) is kept to its warnings unless asked for more.
type floorHandler struct {
	h   slog.Handler
	min slog.Leveler
}

func (f floorHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min.Level() && f.h.Enabled(ctx, l)
}

func (f floorHandler) Handle(ctx context.Context, r slog.Record) error { return f.h.Handle(ctx, r) }

func (f floorHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return floorHandler{h: f.h.WithAttrs(as), min: f.min}
}

func (f floorHandler) WithGroup(name string) slog.Handler {
	return floorHandler{h: f.h.WithGroup(name), min: f.min}
}
