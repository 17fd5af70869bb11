package autorun

import (
	"context"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// recoverer is DBOS's recovery of the pending workflows of given
// executors, the call its enterprise runtime makes; Launch makes it for
// this executor only.
type recoverer interface {
	RecoverPendingWorkflows(executorIDs []string) ([]dbos.WorkflowHandle[any], error)
}

// recoverLoop says this replica is alive and takes over the runs of
// replicas silent for StaleAfter: their pending workflows resume here
// from their last completed step. A replica that comes back after it was
// taken over finds its writes refused by DBOS (the workflow is no longer
// its own).
func (r *Runner) recoverLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		r.heartbeatOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Runner) heartbeatOnce(ctx context.Context) {
	defer r.sweepQueued(ctx, r.now().Add(-sweepGrace))
	if err := r.st.ExecutorHeartbeat(ctx, r.cfg.ExecutorID, r.now()); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("automation executor heartbeat", "err", err)
		}
		return
	}
	rec, ok := r.dbos.(recoverer)
	if !ok {
		return
	}
	for range 16 {
		dead, err := r.st.TakeStaleExecutor(ctx, r.now().Add(-r.cfg.StaleAfter))
		if err != nil || dead == "" {
			if err != nil && ctx.Err() == nil {
				r.log.Warn("find a stale automation executor", "err", err)
			}
			return
		}
		if dead == r.cfg.ExecutorID {
			continue // this replica was paused past StaleAfter: its runs are still here
		}
		hs, err := rec.RecoverPendingWorkflows([]string{dead})
		if err != nil {
			r.log.Error("take over the runs of a stale replica", "executor_id", dead, "err", err)
			// Put it back so another pass (or replica) tries again.
			_ = r.st.ExecutorHeartbeat(ctx, dead, r.now().Add(-r.cfg.StaleAfter-time.Second))
			return
		}
		r.log.Info("took over the runs of a stale replica", "executor_id", dead, "runs", len(hs))
	}
}
