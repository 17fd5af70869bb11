package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/engrams/engrams/internal/netpolicy"
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

// RegistryError is a registry's error answer as far as it may be shown: the
// status and the standard error codes, never the body, which the registry
// chose (Detail has it, for debug logs only).
type RegistryError struct {
	Method string   // of the request answered
	Status int      // HTTP status
	Codes  []string // the distribution spec's error codes the answer gave
	detail string
}

func (e *RegistryError) Error() string {
	s := fmt.Sprintf("the registry answered %d %s", e.Status, http.StatusText(e.Status))
	if e.Method != "" {
		s += " to " + e.Method
	}
	if len(e.Codes) > 0 {
		s += " (" + strings.Join(e.Codes, ", ") + ")"
	}
	return s
}

// Detail is the registry's answer in full (bounded): for debug logs.
func (e *RegistryError) Detail() string { return e.detail }

// maxDetail bounds RegistryError.Detail, and maxShown the text of other
// errors a pull returns (their first line only).
const (
	maxDetail = 2 << 10
	maxShown  = 300
)

// knownCodes are the error codes of the distribution spec; any other code
// a registry sends is its own text and is not shown.
var knownCodes = map[transport.ErrorCode]bool{
	transport.BlobUnknownErrorCode: true, transport.BlobUploadInvalidErrorCode: true, transport.BlobUploadUnknownErrorCode: true,
	transport.DigestInvalidErrorCode: true, transport.ManifestBlobUnknownErrorCode: true, transport.ManifestInvalidErrorCode: true,
	transport.ManifestUnknownErrorCode: true, transport.ManifestUnverifiedErrorCode: true, transport.NameInvalidErrorCode: true,
	transport.NameUnknownErrorCode: true, transport.SizeInvalidErrorCode: true, transport.TagInvalidErrorCode: true,
	transport.UnauthorizedErrorCode: true, transport.DeniedErrorCode: true, transport.UnsupportedErrorCode: true,
	transport.TooManyRequestsErrorCode: true, transport.UnknownErrorCode: true,
}

func newRegistryError(terr *transport.Error) *RegistryError {
	e := &RegistryError{Status: terr.StatusCode, detail: bounded(terr.Error(), maxDetail)}
	if terr.Request != nil {
		e.Method = terr.Request.Method
	}
	for _, d := range terr.Errors {
		if knownCodes[d.Code] && !slices.Contains(e.Codes, string(d.Code)) {
			e.Codes = append(e.Codes, string(d.Code))
		}
	}
	return e
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// shortError shows the first line of an error (bounded) and keeps the rest
// for errors.Is and As: a transfer error may quote what a server sent
// ("no token in bearer response:\n<body>").
type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }

func shorten(err error) error {
	msg := err.Error()
	first, _, cut := strings.Cut(msg, "\n")
	if !cut && len(msg) <= maxShown {
		return err
	}
	return &shortError{msg: bounded(strings.TrimRight(first, ": "), maxShown), err: err}
}

// classify turns an error of a registry exchange into one that may be shown
// (never the registry's body), wrapping the category it belongs to, if any;
// an address the dialer refused stays netpolicy's error.
func classify(err error) error {
	var blocked *netpolicy.BlockedError
	if errors.As(err, &blocked) {
		return fmt.Errorf("reach the registry: %w", blocked)
	}
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return shorten(err)
	}
	re := newRegistryError(terr)
	for _, d := range terr.Errors {
		switch d.Code {
		case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
			return fmt.Errorf("%w: %w", ErrUnauthorized, re)
		case transport.NameUnknownErrorCode, transport.ManifestUnknownErrorCode,
			transport.BlobUnknownErrorCode:
			return fmt.Errorf("%w: %w", ErrNotFound, re)
		}
	}
	switch terr.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrUnauthorized, re)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, re)
	}
	return re
}

// logDetail logs at debug what a registry said in an error answer that
// classify leaves out.
func (p *Puller) logDetail(ref string, err error) {
	var terr *transport.Error
	if errors.As(err, &terr) {
		p.log.Debug("registry error answer", "ref", ref, "status", terr.StatusCode, "detail", bounded(terr.Error(), maxDetail))
		return
	}
	if msg := err.Error(); len(msg) > maxShown || strings.Contains(msg, "\n") {
		p.log.Debug("registry exchange failed", "ref", ref, "detail", bounded(msg, maxDetail))
	}
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
	if errors.As(err, &terr) || isTransfer(err) {
		return classify(err)
	}
	return fmt.Errorf("%w: %w", ErrCorruptLayer, shorten(err))
}
