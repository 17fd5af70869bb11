package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

const guestAPIVersion = guestapi.Version

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiv1.Error{Error: bounded(msg), Code: code})
}

// fail maps an error of a service (its domain category) to a status and code.
func (s *base) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := http.StatusInternalServerError, apiv1.CodeInternal
	switch {
	case errors.Is(err, domain.ErrNotFound):
		status, code = http.StatusNotFound, apiv1.CodeNotFound
	case errors.Is(err, domain.ErrForbidden):
		status, code = http.StatusForbidden, apiv1.CodeForbidden
	case errors.Is(err, domain.ErrInvalid):
		status, code = http.StatusBadRequest, apiv1.CodeBadRequest
	case errors.Is(err, domain.ErrNotActive), errors.Is(err, domain.ErrConflict), errors.Is(err, domain.ErrBusy):
		status, code = http.StatusConflict, apiv1.CodeConflict
	case errors.Is(err, domain.ErrNoRoom):
		status, code = http.StatusServiceUnavailable, apiv1.CodeNoCapacity
		retry := 30
		if room := (*domain.RoomError)(nil); errors.As(err, &room) {
			retry = room.RetrySeconds()
		}
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	case errors.Is(err, hostlink.ErrHostNotConnected):
		status, code = http.StatusServiceUnavailable, apiv1.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusGatewayTimeout, apiv1.CodeTimeout
	case errors.Is(err, context.Canceled):
		return // the client went away
	}
	if status == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, code, err.Error())
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// forbidden, invalid and notFound are a handler's refusals, each in the
// category fail maps to its status (403, 400, 404).
func forbidden(msg string) error { return fmt.Errorf("%w: %s", domain.ErrForbidden, msg) }
func invalid(msg string) error   { return fmt.Errorf("%w: %s", domain.ErrInvalid, msg) }
func notFound(what string) error { return fmt.Errorf("%s: %w", what, domain.ErrNotFound) }
