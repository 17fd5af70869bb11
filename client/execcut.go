package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// ExecCutError is an exec stream that ended without an exit status
// because an operation took the session from under the command: Kind is
// that op's kind ("suspend", "evict" from older servers: the session was suspended; "destroy",
// "expire": it ended; "recover": its host was lost). errors.Is(err,
// ErrNoExit) holds for it.
type ExecCutError struct {
	Kind string
	OpID string
	err  error // the stream's end
}

func (e *ExecCutError) Error() string {
	return fmt.Sprintf("%s while the command ran (op %s): %v", e.What(), e.OpID, e.err)
}

// What says what happened to the session, e.g. "the session was suspended".
func (e *ExecCutError) What() string {
	switch e.Kind {
	case apiv1.OpSuspend, "evict":
		return "the session was suspended"
	case "destroy":
		return "the session was deleted"
	case "expire":
		return "the session reached its time limit"
	case "recover":
		return "the session's host was lost"
	}
	return "the session was moved"
}

func (e *ExecCutError) Unwrap() error { return e.err }

// Suspended reports whether the command was cut short by a suspend.
func (e *ExecCutError) Suspended() bool { return e.Kind == apiv1.OpSuspend || e.Kind == "evict" }

// cuts reports whether an op of kind takes a running session's machine away.
func cuts(kind string) bool {
	switch kind {
	case apiv1.OpSuspend, "evict", apiv1.OpDestroy, apiv1.OpExpire, apiv1.OpRecover, apiv1.OpMove:
		return true
	}
	return false
}

// explainNoExit turns err, an exec stream's end without an exit (ErrNoExit),
// into an *ExecCutError when the session's op log shows an operation that
// took the session after the command started (at epoch startEpoch, from
// apiv1.HeaderSessionEpoch); otherwise it returns err.
func (sc SessionClient) explainNoExit(ctx context.Context, id, startEpoch string, err error) error {
	epoch, perr := strconv.ParseInt(startEpoch, 10, 64)
	if !errors.Is(err, ErrNoExit) || perr != nil || ctx.Err() != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s, gerr := sc.Get(ctx, id)
	if gerr != nil {
		return err
	}
	if op, ok := firstCut(s.Ops, epoch); ok {
		return &ExecCutError{Kind: op.Kind, OpID: op.ID, err: err}
	}
	return err
}

// firstCut is the first op after epoch that takes the machine away.
func firstCut(ops []apiv1.Op, epoch int64) (apiv1.Op, bool) {
	var first apiv1.Op
	found := false
	for _, op := range ops {
		if op.Epoch > epoch && cuts(op.Kind) && (!found || op.Epoch < first.Epoch) {
			first, found = op, true
		}
	}
	return first, found
}
