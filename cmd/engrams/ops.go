package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// newLogger logs at level ("debug", "info", "warn", "error") to w as text
// or as one JSON object per line (format "json").
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// listenOps opens the operations listener (/healthz, /readyz, /metrics);
// addr "" opens none (nil).
func listenOps(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--ops-addr: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// serveOps serves h on ln until ctx ends; with a nil ln it only waits
// (it is one of runBoth's parts, which all end when one returns).
func serveOps(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	if ln == nil {
		<-ctx.Done()
		return nil
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serve --ops-addr %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutCtx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve --ops-addr %s: %w", ln.Addr(), err)
	}
	return nil
}

// secretFlag resolves a secret given on a flag or, to keep it out of argv
// and the process list, in a file (flag name+"-file"): the file's content
// without its trailing newline. A file other users can read is warned of.
func secretFlag(name, value, file string, log *slog.Logger) (string, error) {
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", fmt.Errorf("--%s and --%s-file both given: use one", name, name)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read --%s-file: %w", name, err)
	}
	warnAccessible(log, "--"+name+"-file", file)
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("--%s-file %s is empty", name, file)
	}
	return v, nil
}

// warnAccessible warns when path (a secret, a key, a data dir) can be
// read or written by users other than its owner. A missing path is not
// warned of: whoever creates it makes it private.
func warnAccessible(log *slog.Logger, what, path string) {
	if path == "" {
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		log.Warn(what+" is accessible to other users: restrict it to its owner (chmod go-rwx)",
			"path", path, "mode", fmt.Sprintf("%04o", perm))
	}
}
