package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

func taskOut(t store.Task) apiv1.Task {
	out := apiv1.Task{ID: t.ID, Title: t.Title, State: string(t.State), Error: t.Error, ProfileID: t.ProfileID,
		ProfileVersion: t.ProfileVersion, SessionID: t.SessionID, EventSeq: t.EventSeq, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	var rec struct {
		Receipt *apiv1.Receipt `json:"receipt"`
	}
	if json.Unmarshal(t.Receipt, &rec) == nil {
		out.Receipt = rec.Receipt
	}
	return out
}

func (s *Server) startTask(w http.ResponseWriter, r *http.Request) {
	var req apiv1.StartTaskRequest
	if !s.decode(w, r, &req) {
		return
	}
	t, err := s.co.StartTask(r.Context(), coordinator.StartTaskRequest{Profile: req.Profile, Prompt: req.Prompt, Title: req.Title})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, taskOut(t))
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	var f store.TaskFilter
	if p := r.URL.Query().Get("profile"); p != "" {
		v, err := s.co.Profile(r.Context(), p)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		f.ProfileID = v.Profile.ID
	}
	if st := r.URL.Query().Get("state"); st != "" {
		for _, v := range strings.Split(st, ",") {
			if !store.TaskState(v).Valid() {
				writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("unknown task state %q (starting, running, idle, stopped, failed)", v))
				return
			}
			f.States = append(f.States, store.TaskState(v))
		}
	}
	ts, err := s.st.ListTasks(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.TaskList{Tasks: make([]apiv1.Task, 0, len(ts))}
	for _, t := range ts {
		v := taskOut(t)
		v.Receipt = nil
		out.Tasks = append(out.Tasks, v)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	t, err := s.st.GetTask(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := taskOut(t)
	if ss, err := s.st.ListTaskSessions(r.Context(), t.ID); err == nil {
		for _, ts := range ss {
			out.Sessions = append(out.Sessions, ts.SessionID)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) sendTask(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SendTaskRequest
	if !s.decode(w, r, &req) {
		return
	}
	e, err := s.co.SendTask(r.Context(), r.PathValue("id"), req.Text)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, apiv1.TaskEvent{Seq: e.Seq, Type: e.Type, Data: e.Payload, Time: e.At})
}

func (s *Server) stopTask(w http.ResponseWriter, r *http.Request) {
	t, err := s.co.StopTask(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, taskOut(t))
}

func (s *Server) taskDiff(w http.ResponseWriter, r *http.Request) {
	diffs, err := s.co.TaskDiff(r.Context(), r.PathValue("id"))
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
func (s *Server) taskFiles(w http.ResponseWriter, r *http.Request) {
	t, err := s.co.TaskSession(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rel := r.URL.Query().Get("path")
	p := path.Clean(path.Join(coordinator.TaskWorkRoot, rel))
	if strings.HasPrefix(rel, "/") {
		p = path.Clean(rel)
	}
	if p != coordinator.TaskWorkRoot && !strings.HasPrefix(p, coordinator.TaskWorkRoot+"/") {
		writeError(w, http.StatusBadRequest, "bad_request", "path must stay inside the task's work root "+coordinator.TaskWorkRoot)
		return
	}
	gt, err := s.co.Guest(r.Context(), t.SessionID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	guestPath := guestapi.PathFiles
	if st, err := s.guestStat(r, gt, p); err == nil && st.IsDir {
		guestPath = guestapi.PathFileList
	}
	rp := &httputil.ReverseProxy{
		Transport: gt.Transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			guestRequest(pr.Out, gt, guestPath)
			pr.Out.URL.RawQuery = "path=" + url.QueryEscape(p)
		},
		ModifyResponse: sanitizeGuestResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, "unavailable", "reach the task's session: "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// taskEvents streams a task's conversation as server-sent events, like a
// session's events: the id is the event's seq. With follow (the default)
// the stream stays open until the client leaves or the task is stopped or
// failed and every event was sent.
func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	after, err := afterSeq(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if _, err := s.st.GetTask(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	follow := r.URL.Query().Get("follow") != "false"
	s.serveSSE(w, r, "task:"+id, after, follow, func(ctx context.Context, after int64) ([]sseEvent, error) {
		evs, err := s.st.ListTaskEvents(ctx, id, after, eventPage)
		out := make([]sseEvent, len(evs))
		for i, e := range evs {
			out[i] = sseEvent{seq: e.Seq, typ: e.Type, body: apiv1.TaskEvent{Seq: e.Seq, Type: e.Type, Data: e.Payload, Time: e.At}}
		}
		return out, err
	}, func(ctx context.Context, after int64) bool {
		t, err := s.st.GetTask(ctx, id)
		return err == nil && (t.State == store.TaskStopped || t.State == store.TaskFailed) && t.EventSeq <= after
	})
}

// guestStat stats p in the session's guest.
func (s *Server) guestStat(r *http.Request, gt coordinator.GuestTarget, p string) (guestapi.FileInfo, error) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://host"+gt.PathPrefix+guestapi.PathFileStat+"?path="+url.QueryEscape(p), nil)
	if err != nil {
		return guestapi.FileInfo{}, err
	}
	req.Header = gt.Headers()
	resp, err := gt.Transport.RoundTrip(req)
	if err != nil {
		return guestapi.FileInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return guestapi.FileInfo{}, fmt.Errorf("stat %s: %s", p, resp.Status)
	}
	var fi guestapi.FileInfo
	err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&fi)
	return fi, err
}
