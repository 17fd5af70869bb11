package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
)

// testPauseEnv names a file that arms one test pause point (fault tests
// only; inert unless set). The host agent and its QEMU backend pass named
// points of create, resume and suspend (host.Deps.Checkpoint lists them);
// when the file holds the name of the point reached, the agent removes
// the file, logs "test pause point reached" with the point, and blocks
// that operation until its context ends, so a test can kill -9 the agent
// at exactly that moment. A restarted agent with the same setting does
// not pause again until the file is written anew.
const testPauseEnv = "ENGRAMS_TEST_PAUSE_FILE"

// testCheckpoint is the pause hook armed by testPauseEnv, nil when unset.
func testCheckpoint(log *slog.Logger) func(ctx context.Context, point string) {
	path := os.Getenv(testPauseEnv)
	if path == "" {
		return nil
	}
	log.Warn("test pause points armed: operations block at the point named in this file", "file", path)
	return func(ctx context.Context, point string) {
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != point || os.Remove(path) != nil {
			return
		}
		log.Warn("test pause point reached; blocking until killed", "point", point)
		<-ctx.Done()
	}
}
