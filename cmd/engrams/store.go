package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// openStore picks the backend from the database setting: a postgres://
// URL, or a path (optionally sqlite://) to an SQLite file.
func openStore(ctx context.Context, database string, log *slog.Logger) (store.Store, error) {
	switch {
	case strings.HasPrefix(database, "postgres://"), strings.HasPrefix(database, "postgresql://"):
		st, err := postgres.Open(ctx, postgres.Config{URL: database}, postgres.Deps{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		return st, nil
	case database == "":
		return nil, fmt.Errorf("--database is required: a postgres:// URL or an SQLite file path")
	default:
		path := strings.TrimPrefix(database, "sqlite://")
		st, err := sqlite.Open(ctx, sqlite.Config{Path: path}, sqlite.Deps{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		return st, nil
	}
}

// automationsDB names the store's database for automation runs, which
// keep their tables beside the store's; their library logs at logLevel
// debug, else only its warnings.
func automationsDB(database, logLevel string) autorun.Config {
	c := autorun.Config{SQLitePath: strings.TrimPrefix(database, "sqlite://"), LibraryLogLevel: libraryLogLevel(logLevel)}
	if sharedDatabase(database) {
		c.SQLitePath, c.PostgresURL = "", database
	}
	return c
}

// libraryLogLevel is the least level logged of a library's own lines (the
// durable-execution library's): warn, or everything at --log-level debug.
func libraryLogLevel(logLevel string) slog.Level {
	if strings.EqualFold(logLevel, "debug") {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// devAutomations is dev's automation runs: on its SQLite file, under one
// executor id across restarts (one dev per data dir), so a restarted dev
// resumes its runs at launch.
func devAutomations(path, logLevel string) autorun.Config {
	c := automationsDB(path, logLevel)
	c.ExecutorID = "dev"
	return c
}
