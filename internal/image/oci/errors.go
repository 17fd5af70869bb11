package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Categories callers branch on; every error this package returns that falls in one of
// them wraps it (errors.Is).
var (
	// ErrInvalidReference: the reference is not a valid image reference.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrNotFound: the registry has no such repository, tag, manifest or blob.
	ErrNotFound = errors.New("not found in the registry")
	// ErrUnauthorized: the registry (or its token service) refused the credentials, or
	// anonymous access, for this repository.
	ErrUnauthorized = errors.New("registry refused the credentials")
	// ErrNoPlatform: the reference names no linux/amd64 image.
	ErrNoPlatform = errors.New("no linux/amd64 image")
	// ErrCorruptLayer: a layer's bytes do not match its digest or size, its uncompressed
	// bytes do not match the config's diff_id, or it is not a readable tar stream.
	ErrCorruptLayer = errors.New("corrupt layer")
	// ErrUnsafeLayer: a layer holds an entry that is refused: path traversal, an absolute
	// name, a link leaving the root, a write through a symlink, metadata past the
	// per-entry Limits, or an unsupported entry type. (Device nodes and FIFOs are left
	// out, not refused: Image.LeftOut.)
	ErrUnsafeLayer = errors.New("unsafe layer")
	// ErrTooLarge: the image passed one of the pull's Limits (a *LimitError says which).
	ErrTooLarge = errors.New("image too large")
	// ErrNoShell: the flattened tree has no executable /bin/sh (symlinks followed inside
	// the root).
	ErrNoShell = errors.New("image has no /bin/sh")
)

// unsafeEntry is the ErrUnsafeLayer error for one tar entry.
func unsafeEntry(name, format string, args ...any) error {
	return fmt.Errorf("%w: entry %s %s", ErrUnsafeLayer, shown(name), fmt.Sprintf(format, args...))
}

// shownNameBytes is how much of an entry's name an error quotes.
const shownNameBytes = 160

// shown quotes an entry's name for an error, shortened when long (a name may be
// as long as archive/tar reads, 1 MiB).
func shown(name string) string {
	if len(name) <= shownNameBytes {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%q… (%d bytes)", name[:shownNameBytes], len(name))
}

// classify wraps a registry error with the category it belongs to, if any.
func classify(err error) error {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return err
	}
	for _, d := range terr.Errors {
		switch d.Code {
		case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
			return fmt.Errorf("%w: %w", ErrUnauthorized, err)
		case transport.NameUnknownErrorCode, transport.ManifestUnknownErrorCode,
			transport.BlobUnknownErrorCode:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	switch terr.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// isTransfer reports whether err is a failure of the transfer itself (network, timeout,
// cancellation) rather than a statement about the bytes the registry served.
func isTransfer(err error) bool {
	var nerr net.Error
	var uerr *url.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNRESET) ||
		errors.As(err, &nerr) || errors.As(err, &uerr)
}

// classifyBlobOpen categorizes an error from opening a layer blob: a registry error
// keeps its category, a transfer error stays uncategorized (worth a retry), and
// anything else — ggcr refusing a response whose Content-Length differs from the
// manifest's size — means the registry served the wrong bytes.
func classifyBlobOpen(err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return classify(err)
	}
	if isTransfer(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorruptLayer, err)
}
