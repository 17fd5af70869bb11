package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/engrams/engrams/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := cli.Options{HostAgent: hostRunCmd()}
	if version != "dev" {
		opts.Version = version
	}
	root := cli.NewRoot(opts, serverCmd(), devCmd(), secretsKeyCmd())
	os.Exit(cli.Execute(ctx, root))
}
