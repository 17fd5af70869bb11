package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/mdlayher/vsock"

	"github.com/engrams/engrams/internal/guest"
	"github.com/engrams/engrams/internal/guestapi"
)

func main() { os.Exit(run(os.Args[1:])) }

// options are the parsed flags.
type options struct {
	listens     []string
	workdir     string
	stateDir    string
	env         []string
	logFile     string
	logLevel    string
	harnessDir  string
	harnessHome string
	gatewayAddr string
}

type multiFlag struct{ vals *[]string }

func (m multiFlag) String() string     { return "" }
func (m multiFlag) Set(v string) error { *m.vals = append(*m.vals, v); return nil }

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("engrams-guest", flag.ContinueOnError)
	fs.Var(multiFlag{&o.listens}, "listen", "where to serve (repeatable): unix:/path.sock, tcp:127.0.0.1:PORT, vport:NAME (virtio-serial port, yamux), vsock:PORT")
	fs.StringVar(&o.workdir, "workdir", envOr("ENGRAMS_WORKDIR", "/"), "default working directory of commands (default $ENGRAMS_WORKDIR, else /)")
	fs.StringVar(&o.stateDir, "state-dir", guest.DefaultStateDir, "durable daemon state (outbox journal); must be on the snapshotted disk")
	fs.Var(multiFlag{&o.env}, "env", "K=V added to the base environment of commands (repeatable)")
	fs.StringVar(&o.logFile, "log-file", "", "append logs to this file (default stderr)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.harnessDir, "harness-dir", envOr("ENGRAMS_HARNESS_DIR", guestapi.HarnessMountPoint), "where the harness bundle is mounted (default $ENGRAMS_HARNESS_DIR, else "+guestapi.HarnessMountPoint+")")
	fs.StringVar(&o.harnessHome, "harness-home", "", "HOME of harness processes, on the snapshotted disk (default STATE-DIR/harness-home)")
	fs.StringVar(&o.gatewayAddr, "gateway-addr", envOr("ENGRAMS_GATEWAY_ADDR", guest.DefaultGatewayAddr), "loopback TCP address of the model gateway listener (port 0 picks one)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.stateDir == "" {
		return o, errors.New("--state-dir must not be empty")
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if len(o.listens) == 0 {
		return o, errors.New("at least one --listen is required")
	}
	if err := checkLoopback(o.gatewayAddr); err != nil {
		return o, err
	}
	for _, l := range o.listens {
		if _, _, err := parseListen(l); err != nil {
			return o, err
		}
	}
	for _, kv := range o.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return o, fmt.Errorf("--env wants K=V, got %q", kv)
		}
	}
	return o, nil
}

func parseListen(s string) (kind, addr string, err error) {
	kind, addr, ok := strings.Cut(s, ":")
	if !ok || addr == "" {
		return "", "", fmt.Errorf("--listen %q: want unix:PATH, tcp:HOST:PORT, vport:NAME or vsock:PORT", s)
	}
	switch kind {
	case "unix", "tcp", "vport":
	case "vsock":
		if _, err := strconv.ParseUint(addr, 10, 32); err != nil {
			return "", "", fmt.Errorf("--listen %q: bad vsock port", s)
		}
	default:
		return "", "", fmt.Errorf("--listen %q: unknown transport %q", s, kind)
	}
	return kind, addr, nil
}

func openLog(o options) (*slog.Logger, io.Closer, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	var w io.Writer = os.Stderr
	var c io.Closer = io.NopCloser(nil)
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("open log file: %w", err)
		}
		w, c = f, f
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), c, nil
}

func run(args []string) int {
	o, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "engrams-guest:", err)
		return 2
	}
	log, closer, err := openLog(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "engrams-guest:", err)
		return 2
	}
	defer closer.Close()
	if os.Getpid() == 1 {
		return runInit(log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := guest.New(guest.Config{
		WorkDir:     o.workdir,
		StateDir:    o.stateDir,
		Env:         append(os.Environ(), o.env...),
		HarnessDir:  o.harnessDir,
		HarnessHome: o.harnessHome,
		GatewayAddr: o.gatewayAddr,
	}, guest.Deps{Logger: log})
	var wg sync.WaitGroup
	hctx, hstop := context.WithCancel(ctx)
	wg.Go(func() {
		if err := srv.Run(hctx); err != nil {
			log.Error("harness adapter stopped; commands are still served", "err", err)
		}
	})
	err = serveAll(ctx, log, srv, o.listens)
	hstop()
	wg.Wait()
	if err != nil {
		log.Error("guest daemon stopped", "err", err)
		return 1
	}
	log.Info("guest daemon stopped")
	return 0
}

// serveAll serves on every listener until ctx is done or one fails.
func serveAll(ctx context.Context, log *slog.Logger, srv *guest.Server, listens []string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(listens))
	for _, l := range listens {
		kind, addr, _ := parseListen(l)
		var ln net.Listener
		var err error
		switch kind {
		case "vport":
			wg.Go(func() { errs <- srv.ServeStreams(ctx, guest.OpenVport(addr)) })
			log.Info("serving", "listen", l)
			continue
		case "unix":
			if st, serr := os.Lstat(addr); serr == nil && st.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(addr) // stale socket of a previous run
			}
			ln, err = net.Listen("unix", addr)
		case "tcp":
			ln, err = net.Listen("tcp", addr)
		case "vsock":
			port, _ := strconv.ParseUint(addr, 10, 32)
			ln, err = vsock.Listen(uint32(port), nil)
		}
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("listen %s: %w", l, err)
		}
		log.Info("serving", "listen", l, "addr", ln.Addr().String())
		wg.Go(func() {
			err := srv.Serve(ctx, ln)
			if err != nil {
				cancel()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(c <-chan error) []error {
	var out []error
	for err := range c {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// checkLoopback refuses a gateway address that is not HOST:PORT on a
// loopback host.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--gateway-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--gateway-addr %q: not a loopback address", addr)
	}
	return nil
}

// envOr is the value of the environment variable name, or def when unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
