package guestapi

import "encoding/json"

// Version is the guest API version. Bump it on any incompatible change and
// add a line to the changelog below.
//
// Changelog:
//   - 1 (2026-11-30): ready, exec (WebSocket, optional PTY), files
//     (upload, download, list, stat).
//   - 2 (2026-11-30): sync (quiesce before a snapshot), outbox (apply
//     commands exactly once per guest state, in order); exec/stream (plain
//     HTTP exec over keep-alive connections, NDJSON out).
//   - 3 (2026-11-30): a single-stream transport (virtio-serial) opens
//     each session with the HELLO/OK/START preamble (preamble.go).
//   - 4 (2026-12-01): harness adapter (harness.go): harness status, the
//     durable harness event stream, harness.prompt / harness.interrupt
//     outbox kinds, and tunnels that carry the guest's model gateway
//     connections to the host.
const Version = 4

// HeaderVersion carries Version on every request and response; a daemon
// refuses a request whose version differs (HTTP 400 with ErrorBody).
const HeaderVersion = "Engrams-Guest-Api"

// Routes served by the guest daemon.
const (
	PathReady    = "/v1/ready"      // GET -> Ready
	PathExec     = "/v1/exec"       // GET, WebSocket: ExecStart then frames
	PathExecRun  = "/v1/exec/run"   // POST ExecRequest -> NDJSON StreamFrame lines, the last "exit"
	PathFiles    = "/v1/files"      // GET ?path= download; PUT ?path=&mode= upload (raw body)
	PathFileList = "/v1/files/list" // GET ?path= -> []FileInfo
	PathFileStat = "/v1/files/stat" // GET ?path= -> FileInfo
	PathSync     = "/v1/sync"       // POST: flush every filesystem to its disk -> 204
	PathOutbox   = "/v1/outbox"     // POST OutboxApply -> OutboxState; GET -> OutboxState
)

// OutboxEntry is one command for the guest. Applying it appends it to the
// guest's journal; later issues give kinds meaning (prompts to a harness).
type OutboxEntry struct {
	Seq     int64           `json:"seq"`
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// OutboxApply delivers entries. The daemon applies, in order, each entry
// whose seq is exactly its applied seq + 1, skips those at or below it
// (already applied in this guest state), and stops at a gap. The applied
// seq and the journal live on the guest's disk (fsynced), so a snapshot
// captures exactly what this state has applied.
type OutboxApply struct {
	Entries []OutboxEntry `json:"entries"`
}

// OutboxState answers PathOutbox.
type OutboxState struct {
	Applied int64 `json:"applied"`
}

// Ready answers PathReady.
type Ready struct {
	Version  int     `json:"version"`
	BootID   string  `json:"boot_id"`
	PID      int     `json:"pid"`
	Hostname string  `json:"hostname"`
	Kernel   string  `json:"kernel"`
	Uptime   float64 `json:"uptime_seconds"`
}

// ErrorBody is every non-2xx JSON answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// ExecStart is the first (text) message of an exec stream.
type ExecStart struct {
	Argv      []string          `json:"argv"`
	Env       map[string]string `json:"env,omitempty"`
	Dir       string            `json:"dir,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"` // 0: none
	TTY       bool              `json:"tty,omitempty"`
	Rows      uint16            `json:"rows,omitempty"`
	Cols      uint16            `json:"cols,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"` // the client will send stdin frames; otherwise stdin is empty
}

// ExecRequest runs a command to completion without a WebSocket: stdin is
// given whole, output streams back as NDJSON StreamFrame lines. Its JSON is
// the public API's exec request, so the coordinator forwards it unchanged.
type ExecRequest struct {
	Argv      []string          `json:"argv"`
	Env       map[string]string `json:"env,omitempty"`
	Dir       string            `json:"dir,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Stdin     []byte            `json:"stdin,omitempty"`
}

// StreamFrame is one NDJSON line of PathExecRun's answer: "stdout" or
// "stderr" with Data, then exactly one "exit". Same JSON as the public API.
type StreamFrame struct {
	Type     string `json:"type"`
	Data     []byte `json:"data,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// Binary frames carry one channel byte followed by data.
const (
	ChanStdin  byte = 0
	ChanStdout byte = 1
	ChanStderr byte = 2
)

// Control is a text message after ExecStart, in either direction.
// Client to daemon: "stdin_close", "resize" (Rows, Cols), "signal" (Signal).
// Daemon to client: "started" (PID), then exactly one "exit" (ExitCode, or
// Error when the command could not start or timed out; TimedOut set then).
type Control struct {
	Type     string `json:"type"`
	Rows     uint16 `json:"rows,omitempty"`
	Cols     uint16 `json:"cols,omitempty"`
	Signal   string `json:"signal,omitempty"`
	PID      int    `json:"pid,omitempty"`
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// FileInfo describes one file.
type FileInfo struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"` // e.g. "-rw-r--r--"
	IsDir   bool   `json:"is_dir"`
	ModTime string `json:"mod_time"` // RFC 3339
}
