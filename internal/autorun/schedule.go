package autorun

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/engrams/engrams/internal/automations"
)

// maxFiresPerCheck bounds the occurrences one check starts per
// automation (a schedule every minute over a long pause).
const maxFiresPerCheck = 10

// scheduleLoop starts the runs of schedule triggers. Every replica checks
// every schedule; each occurrence's run is keyed by its time, so the
// store lets one replica start it. Occurrences while no replica ran are
// not made up.
func (r *Runner) scheduleLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.ScheduleEvery)
	defer t.Stop()
	last := r.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := r.now()
		r.FireSchedules(ctx, last, now)
		last = now
	}
}

// FireSchedules starts a run for each occurrence in (from, to] of each
// enabled schedule trigger.
func (r *Runner) FireSchedules(ctx context.Context, from, to time.Time) {
	as, err := r.st.ListAutomations(ctx, "", string(automations.TriggerSchedule)) // every organisation's
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list schedules", "err", err)
		}
		return
	}
	for _, a := range as {
		v, err := r.view(ctx, a)
		if err != nil {
			r.log.Warn("read a schedule", "automation_id", a.ID, "err", err)
			continue
		}
		sched, err := parseSchedule(v.Definition.Trigger)
		if err != nil {
			r.log.Warn("parse a schedule", "automation_id", a.ID, "err", err)
			continue
		}
		n := 0
		for at := sched.Next(from); !at.After(to) && n < maxFiresPerCheck; at = sched.Next(at) {
			n++
			payload := fmt.Appendf(nil, `{"scheduled_at":%q}`, at.UTC().Format(time.RFC3339))
			s, err := r.start(ctx, v, RunRequest{Kind: automations.TriggerSchedule, Trigger: payload,
				DedupKey: "schedule:" + at.UTC().Format(time.RFC3339)})
			if err != nil {
				r.log.Warn("start a scheduled run", "automation_id", a.ID, "at", at, "err", err)
				continue
			}
			if s.Created {
				r.log.Info("scheduled run", "automation_id", a.ID, "run_id", s.Run.ID, "at", at)
			}
		}
	}
}

// parseSchedule reads a schedule trigger's cron in its time zone.
func parseSchedule(t automations.Trigger) (cron.Schedule, error) {
	tz := t.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return cron.ParseStandard("CRON_TZ=" + tz + " " + t.Cron)
}
