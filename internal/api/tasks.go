package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/tasks"
)

func taskOut(t domain.Task) apiv1.Task {
	u := t.Usage
	out := apiv1.Task{ID: string(t.ID), Title: t.Title, State: string(t.State), Error: t.Error, ProfileID: string(t.ProfileID),
		ProfileVersion: t.ProfileVersion, SessionID: string(t.SessionID), EventSeq: t.EventSeq, RunID: string(t.RunID), StartedBy: t.StartedBy,
		OwnerID: string(t.Owner.UserID), Shared: t.Owner.Shared,
		Usage:     apiv1.TaskUsage{Model: u.Model, TokenCounts: tokensOut(u.Tokens), Cost: moneyOut(u.Cost), Unpriced: u.Unpriced},
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	var rec struct {
		Receipt *apiv1.Receipt `json:"receipt"`
	}
	if json.Unmarshal(t.Receipt, &rec) == nil {
		out.Receipt = rec.Receipt
	}
	return out
}

// tokensOut is t on the wire.
func tokensOut(t domain.Tokens) apiv1.TokenCounts {
	return apiv1.TokenCounts{InputTokens: t.Input, OutputTokens: t.Output, CacheReadTokens: t.CacheRead, CacheWriteTokens: t.CacheWrite}
}

// moneyOut is m on the wire; nil when it is no amount.
func moneyOut(m domain.Money) *apiv1.Money {
	if m.Currency == "" {
		return nil
	}
	out := apiv1.MoneyOf(m.Micros, m.Currency)
	return &out
}

// taskEventOut is a task event on the wire, a usage event's usage read
// from its payload.
func taskEventOut(e domain.TaskEvent) apiv1.TaskEvent {
	out := apiv1.TaskEvent{Seq: e.Seq, Type: e.Type, Data: e.Payload, Time: e.At}
	if u, ok := tasks.UsageOf(e); ok {
		out.Usage = &apiv1.TurnUsage{Model: u.Model, TokenCounts: tokensOut(u.Tokens), Cost: moneyOut(u.Cost), PriceTable: u.PriceTable}
	}
	return out
}

// TaskService runs tasks (tasks.Tasks).
type TaskService interface {
	StartTask(ctx context.Context, req tasks.StartTaskRequest) (domain.Task, error)
	SendTask(ctx context.Context, id domain.TaskID, text string) (domain.TaskEvent, error)
	StopTask(ctx context.Context, id domain.TaskID) (domain.Task, error)
	TaskDiff(ctx context.Context, id domain.TaskID) ([]tasks.RepoDiff, error)
	TaskSession(ctx context.Context, id domain.TaskID) (domain.Task, error)
}

// TaskReads are the task rows the API shows (the store satisfies it).
type TaskReads interface {
	GetTask(ctx context.Context, id domain.TaskID) (domain.Task, error)
	ListTasks(ctx context.Context, f domain.TaskFilter) ([]domain.Task, error)
	ListTaskSessions(ctx context.Context, taskID domain.TaskID) ([]domain.TaskSession, error)
	ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error)
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// tasksRouter serves tasks: start, list, the conversation, follow-ups,
// stop, and the changes and files of the task's session.
type tasksRouter struct {
	*base
	co       TaskService
	st       TaskReads
	guests   Guests
	profiles ProfileService // a task list filters by profile name
}

func (s *tasksRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteStartTask, s.startTask)
	h(apiv1.RouteListTasks, s.listTasks)
	h(apiv1.RouteGetTask, s.getTask)
	h(apiv1.RouteTaskEvents, s.taskEvents)
	h(apiv1.RouteSendTask, s.sendTask)
	h(apiv1.RouteStopTask, s.stopTask)
	h(apiv1.RouteTaskDiff, s.taskDiff)
	h(apiv1.RouteTaskFiles, s.taskFiles)
}

// pathTask is the {id} of a task route.
func pathTask(r *http.Request) domain.TaskID { return domain.TaskID(r.PathValue("id")) }

func (s *tasksRouter) startTask(w http.ResponseWriter, r *http.Request) {
	var req apiv1.StartTaskRequest
	if !s.decode(w, r, &req) {
		return
	}
	p := principalFrom(r.Context())
	t, err := s.co.StartTask(r.Context(), tasks.StartTaskRequest{Profile: req.Profile, Prompt: req.Prompt, Title: req.Title,
		StartedBy: p.KeyName, Owner: p.Owner(req.Shared), Grantee: p.Grantee()})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, taskOut(t))
}

func (s *tasksRouter) listTasks(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	viewer := principalFrom(r.Context()).Viewer()
	f := domain.TaskFilter{Viewer: &viewer, Limit: p.limit + 1}
	if p.after != "" {
		at, id, ok := strings.Cut(p.after, "/")
		us, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || id == "" {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "cursor: not a task list's next_cursor")
			return
		}
		f.AfterCreated, f.AfterID = time.UnixMicro(us).UTC(), domain.TaskID(id)
	}
	if p := r.URL.Query().Get("profile"); p != "" {
		v, err := s.profiles.Profile(r.Context(), principalFrom(r.Context()).Grantee(), p)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		f.ProfileID = v.Profile.ID
	}
	if st := r.URL.Query().Get("state"); st != "" {
		for _, v := range strings.Split(st, ",") {
			if !domain.TaskState(v).Valid() {
				writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, fmt.Sprintf("unknown task state %s (starting, running, idle, stopped, failed)", quote(v)))
				return
			}
			f.States = append(f.States, domain.TaskState(v))
		}
	}
	ts, err := s.st.ListTasks(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.TaskList{Items: make([]apiv1.Task, 0, len(ts))}
	if len(ts) > p.limit {
		ts = ts[:p.limit]
		last := ts[len(ts)-1]
		out.NextCursor = cursorOf(strconv.FormatInt(last.CreatedAt.UnixMicro(), 10) + "/" + string(last.ID))
	}
	for _, t := range ts {
		v := taskOut(t)
		v.Receipt = nil
		out.Items = append(out.Items, v)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *tasksRouter) getTask(w http.ResponseWriter, r *http.Request) {
	t, err := s.st.GetTask(r.Context(), pathTask(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := taskOut(t)
	if ss, err := s.st.ListTaskSessions(r.Context(), t.ID); err == nil {
		for _, ts := range ss {
			out.Sessions = append(out.Sessions, string(ts.SessionID))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *tasksRouter) sendTask(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SendTaskRequest
	if !s.decode(w, r, &req) {
		return
	}
	e, err := s.co.SendTask(r.Context(), pathTask(r), req.Text)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, taskEventOut(e))
}

func (s *tasksRouter) stopTask(w http.ResponseWriter, r *http.Request) {
	t, err := s.co.StopTask(r.Context(), pathTask(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, taskOut(t))
}

func (s *tasksRouter) taskDiff(w http.ResponseWriter, r *http.Request) {
	diffs, err := s.co.TaskDiff(r.Context(), pathTask(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.TaskDiff{Repos: make([]apiv1.RepoDiff, 0, len(diffs))}
	for _, d := range diffs {
		out.Repos = append(out.Repos, apiv1.RepoDiff{Path: d.Path, URL: d.URL, Base: d.Base, Diff: d.Diff})
	}
	writeJSON(w, http.StatusOK, out)
}

// taskFiles reads a file (or lists a directory) of the task's session, the
// path relative to the task's workdir; an Idle session resumes.
func (s *tasksRouter) taskFiles(w http.ResponseWriter, r *http.Request) {
	rel := r.URL.Query().Get("path")
	p := path.Join(tasks.WorkRoot, rel)
	if strings.HasPrefix(rel, "/") {
		p = rel
	}
	if err := guestapi.CheckFilePath(p); err != nil {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, guestapi.FilePathError(rel, err))
		return
	}
	if p = path.Clean(p); p != tasks.WorkRoot && !strings.HasPrefix(p, tasks.WorkRoot+"/") {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "path must stay inside the task's work root "+tasks.WorkRoot)
		return
	}
	t, err := s.co.TaskSession(r.Context(), pathTask(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	gt, err := s.guests.Guest(r.Context(), t.SessionID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	guestPath := guestapi.PathFiles
	if st, err := s.guestStat(r, gt, p); err == nil && st.IsDir {
		guestPath = guestapi.PathFileList
	}
	rp := &httputil.ReverseProxy{
		Transport: gt.Route.Transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			guestRequest(pr.Out, gt, guestPath)
			pr.Out.URL.RawQuery = "path=" + url.QueryEscape(p)
		},
		ModifyResponse: sanitizeGuestResponse,
		ErrorHandler:   guestProxyError("reach the task's session"),
	}
	rp.ServeHTTP(w, r)
}

// taskEvents streams a task's conversation as server-sent events, like a
// session's events: the id is the event's seq. With follow (the default)
// the stream stays open until the client leaves or the task is stopped or
// failed and every event was sent.
func (s *tasksRouter) taskEvents(w http.ResponseWriter, r *http.Request) {
	id := pathTask(r)
	after, err := afterSeq(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, err.Error())
		return
	}
	if _, err := s.st.GetTask(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	follow := r.URL.Query().Get("follow") != "false"
	s.serveSSE(w, r, s.st.Subscribe(r.Context(), tasks.Topic(id)), after, follow, taskEventPage, func(ctx context.Context, after int64) ([]sseEvent, error) {
		evs, err := s.st.ListTaskEvents(ctx, id, after, taskEventPage)
		out := make([]sseEvent, len(evs))
		for i, e := range evs {
			out[i] = sseEvent{seq: e.Seq, typ: e.Type, body: taskEventOut(e)}
		}
		return out, err
	}, func(ctx context.Context, after int64) bool {
		t, err := s.st.GetTask(ctx, id)
		return err == nil && (t.State == domain.TaskStopped || t.State == domain.TaskFailed) && t.EventSeq <= after
	})
}

// guestStat stats p in the session's guest.
func (s *tasksRouter) guestStat(r *http.Request, gt coordinator.GuestTarget, p string) (guestapi.FileInfo, error) {
	return gt.Client().Stat(r.Context(), p)
}
