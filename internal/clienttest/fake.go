package clienttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// Token is the bearer token the fake accepts.
const Token = "engrams_test_token"

// BaseTime is the creation time of everything the fake makes; event n is
// stamped BaseTime()+(n-1) seconds.
func BaseTime() time.Time { return time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC) }

// Server is a fake coordinator serving the public API from memory.
type Server struct {
	URL string
	ts  *httptest.Server

	mu       sync.Mutex
	nextID   int
	sessions []*apiv1.Session
	events   map[string][]apiv1.Event
	files    map[string]map[string]file    // session -> path -> file
	snaps    map[string][]apiv1.Snapshot   // session -> committed snapshots, oldest first
	outbox   map[string][]apiv1.OutboxItem // session -> items in seq order
	nextSnap int
	nextOp   int
	ops      map[string][]apiv1.Op // session -> ops after its create
	hosts    []*apiv1.Host
	tokens   []*apiv1.Token
	changed  chan struct{} // closed and replaced when events change
	lastIDs  []string      // Last-Event-ID headers received
	requests []string      // "METHOD /path?query"
	idem     map[string]string
	drop     int    // see DropAfter
	snapFail string // see FailSnapshots
	raceOn   string // see RaceSuspend
	endMsg   bool   // see EndMessage

	images     []*fakeImage
	nextImage  int
	nextJob    int
	imageSteps []apiv1.ImageJob           // see ScriptImageJobs
	enables    []apiv1.EnableImageRequest // see EnableRequests

	egress map[string][]apiv1.EgressEvent // session -> its egress log, oldest first; see AddEgress
}

// EndMessage makes a followed event stream of a terminal session end with
// the apiv1.EventStreamEnd message; by default it just closes, as the real
// server does.
func (s *Server) EndMessage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endMsg = on
}

// DropAfter makes the events route drop a followed stream after sending n
// events on one connection (0: never), to exercise reconnects.
func (s *Server) DropAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = n
}

type file struct {
	data []byte
	mode string
}

// NewServer starts a fake on 127.0.0.1 and stops it when t ends. It holds
// one ready host, "h1" (qemu/tcg).
func NewServer(t testing.TB) *Server {
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake as NewServer does, for callers without a testing.TB
// (examples); Close stops it.
func Start() *Server {
	s := &Server{
		events:  map[string][]apiv1.Event{},
		files:   map[string]map[string]file{},
		snaps:   map[string][]apiv1.Snapshot{},
		ops:     map[string][]apiv1.Op{},
		outbox:  map[string][]apiv1.OutboxItem{},
		changed: make(chan struct{}),
		idem:    map[string]string{},
	}
	s.hosts = append(s.hosts, &apiv1.Host{
		ID: "h1", Name: "kvm-1", State: "ready",
		Facts: apiv1.HostFacts{
			Hostname: "kvm-1", Arch: "amd64", Kernel: "6.1.0", AgentVersion: "v0.1.0",
			Backend: apiv1.BackendFacts{Name: "qemu", Version: "7.2", Acceleration: "tcg", Usable: true, Isolation: true,
				Reason: "firecracker: no binary; qemu: /dev/kvm unusable, TCG works"},
			Available: []apiv1.BackendFacts{
				{Name: "firecracker", Acceleration: "kvm", Isolation: true, Reason: "firecracker binary not found"},
				{Name: "qemu", Version: "7.2", Acceleration: "tcg", Isolation: true, Usable: true},
			},
		},
		Capacity:      apiv1.Capacity{MemoryMiB: 8192, VCPUs: 4, MaxSessions: 10, Sessions: 2},
		LastHeartbeat: BaseTime().Add(-5 * time.Second),
		CreatedAt:     BaseTime(),
	})
	mux := http.NewServeMux()
	s.routes(mux)
	s.ts = httptest.NewServer(mux)
	s.URL = s.ts.URL
	return s
}

// Close stops the fake.
func (s *Server) Close() { s.ts.Close() }

func (s *Server) routes(mux *http.ServeMux) {
	mux.HandleFunc(apiv1.RouteVersion, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, apiv1.Version{Version: "v9.9.9-fake", HostlinkProtocol: hostlink.Version, GuestAPI: guestapi.Version, ReplicaID: "r1"})
	})
	mux.HandleFunc(apiv1.RouteOpenAPI, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "openapi: 3.1.0\n")
	})
	auth := func(route string, h http.HandlerFunc) {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.requests = append(s.requests, r.Method+" "+r.URL.RequestURI())
			s.mu.Unlock()
			if r.Header.Get("Authorization") != "Bearer "+Token {
				writeErr(w, 401, "unauthorized", "missing or unknown token")
				return
			}
			h(w, r)
		})
	}
	auth(apiv1.RouteCreateSession, s.createSession)
	auth(apiv1.RouteListSessions, s.listSessions)
	auth(apiv1.RouteGetSession, s.withSession(s.getSession))
	auth(apiv1.RouteDeleteSession, s.withSession(s.deleteSession))
	auth(apiv1.RouteExec, s.withSession(s.inUse(s.exec)))
	auth(apiv1.RouteExecWS, s.withSession(s.inUse(s.execWS)))
	auth(apiv1.RouteFileGet, s.withSession(s.inUse(s.fileGet)))
	auth(apiv1.RouteFilePut, s.withSession(s.inUse(s.filePut)))
	auth(apiv1.RouteFileList, s.withSession(s.inUse(s.fileList)))
	auth(apiv1.RouteFileStat, s.withSession(s.inUse(s.fileStat)))
	auth(apiv1.RouteEvents, s.withSession(s.streamEvents))
	auth(apiv1.RouteSuspend, s.withSession(s.suspend))
	auth(apiv1.RouteResume, s.withSession(s.resume))
	auth(apiv1.RouteSnapshot, s.withSession(s.snapshot))
	auth(apiv1.RouteOutboxPut, s.withSession(s.putOutbox))
	auth(apiv1.RouteOutboxList, s.withSession(s.listOutbox))
	auth(apiv1.RouteEgress, s.withSession(s.listEgress))
	adminFake{s}.routes(auth)
	imageFake{s}.routes(auth)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiv1.Error{Error: msg, Code: code})
}

// Requests returns every authenticated request seen, as "METHOD /path?query".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// LastEventIDs returns the Last-Event-ID headers of event requests, in order
// ("" for a request without one).
func (s *Server) LastEventIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lastIDs)
}

// AddEvent appends an event to a session's log and wakes followers.
func (s *Server) AddEvent(sessionID, typ string, data any) apiv1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addEventLocked(sessionID, typ, data)
}

func (s *Server) addEventLocked(sessionID, typ string, data any) apiv1.Event {
	b, _ := json.Marshal(data)
	evs := s.events[sessionID]
	ev := apiv1.Event{Seq: int64(len(evs) + 1), Type: typ, Data: b, Time: BaseTime().Add(time.Duration(len(evs)) * time.Second)}
	s.events[sessionID] = append(evs, ev)
	close(s.changed)
	s.changed = make(chan struct{})
	return ev
}

// SetSessionState changes a session's state (e.g. to "completed", which
// ends followed event streams once every event was sent) and wakes
// followers.
func (s *Server) SetSessionState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sess := range s.sessions {
		if sess.ID == id {
			sess.State = state
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) findSession(id string) *apiv1.Session {
	for _, sess := range s.sessions {
		if sess.ID == id {
			return sess
		}
	}
	return nil
}

func (s *Server) withSession(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		s.mu.Lock()
		ok := s.findSession(id) != nil
		s.mu.Unlock()
		if !ok {
			writeErr(w, 404, "not_found", fmt.Sprintf("session %s not found", id))
			return
		}
		h(w, r, id)
	}
}

// NoRoomImage is an image whose sessions find no room: creating one
// answers 503 no_capacity with Retry-After 42.
const NoRoomImage = "no-room"

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSessionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, 400, "bad_request", "decode body: "+err.Error())
		return
	}
	if req.MemoryMiB < 0 || req.VCPUs < 0 {
		writeErr(w, 400, "bad_request", "memory_mib and vcpus must not be negative")
		return
	}
	if req.Image == NoRoomImage {
		w.Header().Set("Retry-After", "42")
		writeErr(w, 503, "no_capacity", "session s9 not started: no host has room: h1: 0 MiB free, 512 MiB asked (waited 1m0s in the queue); retry after 42s")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.idem[req.IdempotencyKey]; ok && req.IdempotencyKey != "" {
		writeJSON(w, 200, s.findSession(id))
		return
	}
	s.nextID++
	id := fmt.Sprintf("s%d", s.nextID)
	state, status := "active", 201
	if r.URL.Query().Get("wait") == "false" {
		state, status = "created", 202
	}
	if req.MemoryMiB == 0 {
		req.MemoryMiB = 512
	}
	if req.VCPUs == 0 {
		req.VCPUs = 1
	}
	sess := &apiv1.Session{
		ID: id, State: state, DesiredState: "active", HostID: "h1", Epoch: 1,
		Spec: req.SessionSpec, LastActivity: BaseTime(), CreatedAt: BaseTime(), UpdatedAt: BaseTime(),
	}
	s.sessions = append(s.sessions, sess)
	if req.IdempotencyKey != "" {
		s.idem[req.IdempotencyKey] = id
	}
	s.addEventLocked(id, "state", map[string]string{"state": state})
	writeJSON(w, status, sess)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	state, host := r.URL.Query().Get("state"), r.URL.Query().Get("host")
	s.mu.Lock()
	defer s.mu.Unlock()
	out := apiv1.SessionList{Items: []apiv1.Session{}}
	for _, sess := range slices.Backward(s.sessions) {
		if (state == "" || sess.State == state) && (host == "" || sess.HostID == host) {
			out.Items = append(out.Items, *sess)
		}
	}
	writeJSON(w, 200, out)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := *s.findSession(id)
	sess.Ops = []apiv1.Op{{ID: "op1", Kind: "create", State: "done", Step: "boot", Epoch: 1, Attempts: 1, CreatedAt: BaseTime(), UpdatedAt: BaseTime()}}
	sess.Ops = append(sess.Ops, s.ops[id]...)
	sess.Snapshots = slices.Clone(s.snaps[id])
	writeJSON(w, 200, sess)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.findSession(id)
	status := 200
	if r.URL.Query().Get("wait") == "false" {
		sess.State, status = "deleting", 202
	} else {
		sess.State = "completed"
	}
	sess.DesiredState = "completed"
	writeJSON(w, status, sess)
}

func (s *Server) fileGet(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	f, ok := s.files[id][r.URL.Query().Get("path")]
	s.mu.Unlock()
	if !ok {
		writeErr(w, 404, "not_found", "no such file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(f.data)
}

func (s *Server) filePut(w http.ResponseWriter, r *http.Request, id string) {
	p := r.URL.Query().Get("path")
	if !path.IsAbs(p) {
		writeErr(w, 400, "bad_request", "path must be absolute")
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		writeErr(w, 400, "bad_request", err.Error())
		return
	}
	mode := r.URL.Query().Get("mode")
	if mode == "" {
		mode = "0644"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files[id] == nil {
		s.files[id] = map[string]file{}
	}
	s.files[id][p] = file{data: b, mode: mode}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) info(p string, f file) apiv1.FileInfo {
	m, _ := strconv.ParseUint(f.mode, 8, 32)
	return apiv1.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(f.data)), Mode: fmt.Sprintf("%v", modeString(uint32(m))), ModTime: BaseTime().Format(time.RFC3339)}
}

func dirInfo(p string) apiv1.FileInfo {
	return apiv1.FileInfo{Name: path.Base(p), Path: p, Mode: "drwxr-xr-x", IsDir: true, ModTime: BaseTime().Format(time.RFC3339)}
}

func modeString(m uint32) string {
	const rwx = "rwxrwxrwx"
	b := []byte("-")
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b = append(b, rwx[i])
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
}

func (s *Server) fileList(w http.ResponseWriter, r *http.Request, id string) {
	dir := path.Clean(r.URL.Query().Get("path"))
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []apiv1.FileInfo{}
	subdirs := map[string]bool{} // directories are implied by the files under them
	for p, f := range s.files[id] {
		switch rel, under := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/"); {
		case path.Dir(p) == dir:
			out = append(out, s.info(p, f))
		case under && strings.Contains(rel, "/"):
			subdirs[strings.SplitN(rel, "/", 2)[0]] = true
		}
	}
	for d := range subdirs {
		out = append(out, dirInfo(path.Join(dir, d)))
	}
	slices.SortFunc(out, func(a, b apiv1.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, 200, out)
}

func (s *Server) fileStat(w http.ResponseWriter, r *http.Request, id string) {
	p := r.URL.Query().Get("path")
	s.mu.Lock()
	f, ok := s.files[id][p]
	isDir := false
	for q := range s.files[id] {
		isDir = isDir || strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/")
	}
	s.mu.Unlock()
	if !ok && isDir {
		writeJSON(w, 200, dirInfo(p))
		return
	}
	if !ok {
		writeErr(w, 404, "not_found", "no such file")
		return
	}
	writeJSON(w, 200, s.info(p, f))
}
