package apiv1

// The interactive exec of RouteExecWS: the client's first message is an
// ExecStart (text, JSON); after it, binary messages carry one channel byte
// (Chan*) followed by data, and text messages are ExecControl JSON objects
// in either direction. The server relays them to and from the guest
// unchanged.

// A browser cannot set Authorization on a WebSocket: it offers the
// subprotocols WSProtocol and WSBearerPrefix+token instead, and the server
// answers with WSProtocol. Other clients send Authorization as usual.
const (
	WSProtocol     = "engrams.v1"
	WSBearerPrefix = "bearer."
)

// Binary frames of RouteExecWS carry one channel byte followed by data.
const (
	ChanStdin  byte = 0
	ChanStdout byte = 1 // with a TTY, all output
	ChanStderr byte = 2
)

// ExecStart is the first (text) message of RouteExecWS.
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

// Exec control message types.
const (
	ControlStdinClose = "stdin_close" // client: no more stdin
	ControlResize     = "resize"      // client: Rows, Cols
	ControlSignal     = "signal"      // client: Signal, e.g. "SIGINT"
	ControlStarted    = "started"     // server: PID
	ControlExit       = "exit"        // server, exactly once: ExitCode, or Error (and TimedOut)
)

// ExecControl is a text message of RouteExecWS after ExecStart, in either
// direction (the OpenAPI schema Control). Client to server: "stdin_close",
// "resize" (Rows, Cols), "signal" (Signal). Server to client: "started"
// (PID), then exactly one "exit" (ExitCode, or Error when the command could
// not start or timed out; TimedOut set then).
type ExecControl struct {
	Type     string `json:"type"` // Control*
	Rows     uint16 `json:"rows,omitempty"`
	Cols     uint16 `json:"cols,omitempty"`
	Signal   string `json:"signal,omitempty"`
	PID      int    `json:"pid,omitempty"`
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// FileInfo describes one file in a session: RouteFileStat answers one,
// RouteFileList and a directory's RouteTaskFiles a JSON array of them.
type FileInfo struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"` // e.g. "-rw-r--r--"
	IsDir   bool   `json:"is_dir"`
	ModTime string `json:"mod_time"` // RFC 3339
}
