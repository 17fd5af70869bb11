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
	root := cli.NewRoot(cli.Options{HostAgent: hostRunCmd()}, serverCmd(), devCmd(), secretsKeyCmd())
	os.Exit(cli.Execute(ctx, root))
}
