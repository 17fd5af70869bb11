package failure

// Error is a failure with the answer the coordinator gets.
type Error struct {
	Status int
	Code   string // a hostlink.Code*
	Err    error
	Tail   string // output tail of a failed warm-up
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New is err answered with status and code.
func New(status int, code string, err error) *Error {
	return &Error{Status: status, Code: code, Err: err}
}
