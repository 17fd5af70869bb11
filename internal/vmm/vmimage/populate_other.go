//go:build !linux

package vmimage

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// errOrderedPopulate: copying a tree into ext4 entry by entry (populate_linux.go) reads
// Linux's stat and extended attributes.
var errOrderedPopulate = fmt.Errorf("copying a tree in layer order into ext4 requires Linux (this is %s): %w", runtime.GOOS, errors.ErrUnsupported)

// writeOrderScript refuses: see errOrderedPopulate.
func writeOrderScript(string, []string, string) (string, error) { return "", errOrderedPopulate }

// runScript refuses: see errOrderedPopulate (writeOrderScript made no script to run).
func (b *Builder) runScript(context.Context, string, string, int64) error { return errOrderedPopulate }
