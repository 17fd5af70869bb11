package apiv1

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Task routes.
const (
	RouteStartTask  = "POST /v1/tasks"               // StartTaskRequest -> Task (201); its session starts in the background
	RouteListTasks  = "GET /v1/tasks"                // ?profile=&state= -> TaskList, oldest first
	RouteGetTask    = "GET /v1/tasks/{id}"           // -> Task (with its receipt)
	RouteTaskEvents = "GET /v1/tasks/{id}/events"    // SSE of TaskEvent; ?follow=false ends after the backlog; Last-Event-ID or ?after=
	RouteSendTask   = "POST /v1/tasks/{id}/messages" // SendTaskRequest -> TaskEvent (the prompt); an Idle session resumes
	RouteStopTask   = "POST /v1/tasks/{id}/stop"     // -> Task (stopped): the agent is interrupted, the session suspended
	RouteTaskDiff   = "GET /v1/tasks/{id}/diff"      // -> TaskDiff
	RouteTaskFiles  = "GET /v1/tasks/{id}/files"     // ?path= (relative to the task's workdir): a file's bytes, or a directory's []FileInfo as JSON
)

// StartTaskRequest starts an agent on a prompt in a session made from a
// profile.
type StartTaskRequest struct {
	Profile string `json:"profile"` // name or id
	Prompt  string `json:"prompt"`
	Title   string `json:"title,omitempty"` // default: the prompt's first line
	// Shared shows the task to every member of the organisation; by
	// default it is private to who started it (and the organisation's
	// admins).
	Shared bool `json:"shared,omitempty"`
}

// SendTaskRequest is a follow-up prompt.
type SendTaskRequest struct {
	Text string `json:"text"`
}

// Task states.
const (
	TaskStarting = "starting" // its session is starting, repositories cloning
	TaskRunning  = "running"  // the agent works on a prompt
	TaskIdle     = "idle"     // waiting for a follow-up (its session may be suspended)
	TaskStopped  = "stopped"
	TaskFailed   = "failed"
)

// Task is one agent's work: a profile, a conversation and the sessions it
// ran in.
type Task struct {
	ID             string   `json:"id"`
	Title          string   `json:"title"`
	State          string   `json:"state"`
	Error          string   `json:"error,omitempty"` // the last turn's error, or why the task failed
	ProfileID      string   `json:"profile_id"`
	ProfileVersion int64    `json:"profile_version"`
	SessionID      string   `json:"session_id,omitempty"`
	Sessions       []string `json:"sessions,omitempty"` // every session it used, in order (GET only)
	EventSeq       int64    `json:"event_seq"`
	Receipt        *Receipt `json:"receipt,omitempty"` // the grant receipt it started with
	// RunID is the automation run that started it; "" when a user did.
	RunID string `json:"run_id,omitempty"`
	// StartedBy is the name of the API token a user started it with (the
	// CLI's, or the dashboard's sign-in); "" for a run.
	StartedBy string `json:"started_by,omitempty"`
	// OwnerID is the person whose task it is ("" for the organisation's,
	// as a run's); Shared says every member of the organisation sees it.
	OwnerID   string    `json:"owner_id,omitempty"`
	Shared    bool      `json:"shared"`
	Usage     TaskUsage `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Money is an exact amount: Micros are millionths of the currency's unit,
// Amount the same as a decimal string ("0.004575").
type Money struct {
	Amount   string `json:"amount"`
	Micros   int64  `json:"micros"`
	Currency string `json:"currency"` // ISO 4217, e.g. USD
}

// MoneyOf is micros of currency as Money.
func MoneyOf(micros int64, currency string) Money {
	return Money{Amount: MicrosAmount(micros), Micros: micros, Currency: currency}
}

// MicrosAmount is micros (millionths) as an exact decimal without
// trailing zeros: 4575 is "0.004575", 1500000 is "1.5".
func MicrosAmount(micros int64) string {
	sign := ""
	u := uint64(micros)
	if micros < 0 {
		sign, u = "-", uint64(-micros)
	}
	whole, frac := strconv.FormatUint(u/1_000_000, 10), u%1_000_000
	if frac == 0 {
		return sign + whole
	}
	f := strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	return sign + whole + "." + f
}

// TaskUsage is what a task's turns used, summed. Cost sums the priced
// usage events (each priced from the table its event names); Unpriced
// counts those with tokens but no price (a model in no table, and no cost
// from the harness).
type TaskUsage struct {
	Model string `json:"model,omitempty"` // of the last usage that named one
	TokenCounts
	Cost     *Money `json:"cost,omitempty"`
	Unpriced int64  `json:"unpriced_usages,omitempty"`
}

// TokenCounts are a usage's tokens by kind.
type TokenCounts struct {
	InputTokens      int64 `json:"input_tokens"` // every input token, cached ones included
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// TurnUsage is one usage event of a turn: one model's tokens and, when
// priced, their cost and the price table (id and version) it came from:
// the server's ("engrams-2025-10"), or "harness" when the harness
// reckoned it for a model the table lacks.
type TurnUsage struct {
	Model string `json:"model,omitempty"`
	TokenCounts
	Cost       *Money `json:"cost,omitempty"`
	PriceTable string `json:"price_table,omitempty"`
}

// TaskList answers RouteListTasks.
type TaskList struct {
	Items []Task `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// TaskEvent is one entry of a task's conversation: a prompt, run_started,
// assistant_text, tool_call, tool_result, file_changed, usage, question,
// idle, error (the harness's), or session, repo_cloned, stopped,
// setup_failed (the coordinator's).
type TaskEvent struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
	Time time.Time       `json:"time"`
	// Usage is a usage event's usage, read from its data.
	Usage *TurnUsage `json:"usage,omitempty"`
}

// TaskDiff is the changes in each repository a task cloned, against the
// commit it was cloned at.
type TaskDiff struct {
	Repos []RepoDiff `json:"repos"`
}

// RepoDiff is one repository's unified diff ("" when unchanged).
type RepoDiff struct {
	Path string `json:"path"`
	URL  string `json:"url"`
	Base string `json:"base"`
	Diff string `json:"diff"`
}

// Patch is the diff with its paths made relative to the task's work root
// (a/REPO/x, b/REPO/x, and a rename's "rename from/to REPO/x"), so several
// repositories' diffs make one patch. Only a file's header lines are
// rewritten: a hunk's lines are content, whatever they look like.
func (d RepoDiff) Patch() string {
	var b strings.Builder
	header := false // from a "diff --git" line to its first hunk
	for _, line := range strings.SplitAfter(d.Diff, "\n") {
		switch {
		case strings.HasPrefix(line, "diff --git a/"):
			header = true
			line = strings.Replace(strings.Replace(line, " a/", " a/"+d.Path+"/", 1), " b/", " b/"+d.Path+"/", 1)
		case strings.HasPrefix(line, "@@"):
			header = false
		case !header:
		case strings.HasPrefix(line, "--- a/"), strings.HasPrefix(line, "+++ b/"):
			line = line[:6] + d.Path + "/" + line[6:]
		case strings.HasPrefix(line, "rename from "), strings.HasPrefix(line, "rename to "):
			dir, name, _ := strings.Cut(strings.TrimPrefix(line, "rename "), " ")
			line = "rename " + dir + " " + d.Path + "/" + name
		}
		b.WriteString(line)
	}
	return b.String()
}

// RouteTaskPR pushes a task's changes as a branch and opens a pull request
// of it through the GitHub integration: TaskPRRequest -> TaskPR.
const RouteTaskPR = "POST /v1/tasks/{id}/pr"

// TaskPRRequest opens a pull request of a task's changes on Repo
// (owner/name), from its repository at Path ("" for its only one).
type TaskPRRequest struct {
	Repo  string `json:"repo"`
	Title string `json:"title,omitempty"`
	Path  string `json:"path,omitempty"`
}

// TaskPR is a pull request opened from a task.
type TaskPR struct {
	URL    string `json:"url"`
	Number int    `json:"number"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
}
