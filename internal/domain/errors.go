package domain

import "errors"

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
)
