package domain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Error categories callers branch on, whichever layer found them: the store
// reports ErrNotFound and ErrConflict as these same values, and the API maps
// each to one status.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("conflict")        // not in the state the change expected
	ErrInvalid   = errors.New("invalid request") // bad input; nothing was changed
	ErrNotActive = errors.New("session is not active")
	ErrBusy      = errors.New("another operation is in progress")
	ErrForbidden = errors.New("forbidden") // the caller may see the thing but not do this to it
	// ErrNoRoom: every host that could run the session is full and nothing
	// could be evicted in time; nothing was started, retry later
	// (RoomError says when).
	ErrNoRoom = errors.New("no host has room")
)

// RoomError is a refusal for lack of room (it matches ErrNoRoom).
type RoomError struct {
	Why        string        // what each host lacked
	RetryAfter time.Duration // when a retry may find room
}

func (e *RoomError) Error() string {
	return fmt.Sprintf("%v: %s%s%ds", ErrNoRoom, e.Why, retrySuffix, e.RetrySeconds())
}

// Is makes errors.Is(err, ErrNoRoom) hold.
func (e *RoomError) Is(target error) bool { return target == ErrNoRoom }

// RoomRefusal reads a RoomError back from its text (as an op records its
// error); ok is false for any other text.
func RoomRefusal(msg string) (e *RoomError, ok bool) {
	rest, ok := strings.CutPrefix(msg, ErrNoRoom.Error()+": ")
	i := strings.LastIndex(rest, retrySuffix)
	if !ok || i < 0 {
		return nil, false
	}
	secs, err := strconv.Atoi(strings.TrimSuffix(rest[i+len(retrySuffix):], "s"))
	if err != nil || secs < 1 {
		return nil, false
	}
	return &RoomError{Why: rest[:i], RetryAfter: time.Duration(secs) * time.Second}, true
}

const retrySuffix = "; retry after "

// RetrySeconds is RetryAfter in whole seconds, at least 1.
func (e *RoomError) RetrySeconds() int {
	return max(int((e.RetryAfter+time.Second-1)/time.Second), 1)
}
