package automations

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/engrams/engrams/internal/domain"
)

// Limits bound a definition and its runs.
type Limits struct {
	MaxBlocks    int           // in the whole tree
	MaxDepth     int           // of nested conditions and loops
	MaxLoop      int           // a loop's Max
	MaxWait      time.Duration // a wait_idle's Timeout
	MaxRunLength time.Duration // a whole run
	MaxInputs    int
	MaxText      int // bytes of one template or field
}

// DefaultLimits are the limits unless the server is configured otherwise.
func DefaultLimits() Limits {
	return Limits{MaxBlocks: 200, MaxDepth: 8, MaxLoop: 100, MaxWait: 24 * time.Hour, MaxRunLength: 7 * 24 * time.Hour,
		MaxInputs: 32, MaxText: 64 << 10}
}

// Problem is one thing wrong with a definition, and where.
type Problem struct {
	Path string // e.g. "blocks[2].then[0].prompt"
	Msg  string
}

func (p Problem) String() string { return p.Path + ": " + p.Msg }

var (
	nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,62}$`)
	slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// validator collects problems while walking a definition.
type validator struct {
	lim    Limits
	inputs map[string]bool
	ran    []string // ids of blocks that ran before the one checked (in order)
	ids    map[string]string
	probs  []Problem
	blocks int
	kinds  map[string]BlockKind // every block id's kind
	seen   map[string]bool      // ids of the blocks checked so far, in any branch
}

func (v *validator) add(path, format string, args ...any) {
	v.probs = append(v.probs, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Validate lists every problem of d (none: it may be saved).
func Validate(d Definition, lim Limits) []Problem {
	v := &validator{lim: lim, inputs: map[string]bool{}, ids: map[string]string{}, kinds: map[string]BlockKind{}, seen: map[string]bool{}}
	if !slugRE.MatchString(d.Name) {
		v.add("name", "%q: want 1-63 of a-z 0-9 - starting with a letter or digit", d.Name)
	}
	v.trigger(d.Trigger)
	v.inputList(d.Inputs)
	if len(d.Blocks) == 0 {
		v.add("blocks", "an automation does something: give it at least one block")
	}
	v.settings(d.Settings) // before the blocks: the key is computed before any runs
	v.blockList("blocks", d.Blocks, 1)
	return v.probs
}

func (v *validator) trigger(t Trigger) {
	switch t.Kind {
	case TriggerManual, TriggerSlackMention, TriggerLinearIssue:
	case TriggerSchedule:
		if _, err := cron.ParseStandard(t.Cron); err != nil || strings.HasPrefix(strings.TrimSpace(t.Cron), "@every") {
			v.add("trigger.cron", "%q: want five fields (minute hour day month weekday): %v", t.Cron, err)
		}
		if t.TimeZone != "" {
			if _, err := time.LoadLocation(t.TimeZone); err != nil || t.TimeZone == "Local" {
				v.add("trigger.time_zone", "%q is not an IANA time zone (e.g. Europe/Paris)", t.TimeZone)
			}
		}
	case TriggerWebhook:
		if !slugRE.MatchString(t.Slug) {
			v.add("trigger.slug", "%q: want 1-63 of a-z 0-9 - (the hook is POST /v1/hooks/SLUG)", t.Slug)
		}
	case TriggerGitHubPR:
		if len(t.Repos) == 0 {
			v.add("trigger.repos", "name the repositories (owner/name) whose pull requests start runs")
		}
		for i, r := range t.Repos {
			if !domain.ValidRepo(r) {
				v.add(fmt.Sprintf("trigger.repos[%d]", i), "%q: want owner/name", r)
			}
		}
		if t.MinAuthor != "" && !slices.Contains(domain.AuthorAssociations, t.MinAuthor) {
			v.add("trigger.min_author", "%q: want one of %s", t.MinAuthor, strings.Join(domain.AuthorAssociations, ", "))
		}
		for i, e := range t.Events {
			if !slices.Contains([]string{"opened", "synchronize", "reopened", "review_requested", "comment"}, e) {
				v.add(fmt.Sprintf("trigger.events[%d]", i), "%q: want opened, synchronize, reopened, review_requested or comment", e)
			}
		}
	default:
		v.add("trigger.kind", "%q: want manual, schedule, webhook, slack_mention, github_pr or linear_issue", t.Kind)
	}
}

func (v *validator) inputList(in []Input) {
	if len(in) > v.lim.MaxInputs {
		v.add("inputs", "%d inputs, at most %d", len(in), v.lim.MaxInputs)
	}
	for i, x := range in {
		path := fmt.Sprintf("inputs[%d]", i)
		switch {
		case !nameRE.MatchString(x.Name):
			v.add(path+".name", "%q: want a name of letters, digits, _ and -", x.Name)
		case v.inputs[x.Name]:
			v.add(path+".name", "%q is listed twice", x.Name)
		}
		v.inputs[x.Name] = true
		if !slices.Contains([]InputType{InputString, InputNumber, InputBoolean, InputJSON}, x.Type) {
			v.add(path+".type", "%q: want string, number, boolean or json", x.Type)
			continue
		}
		if x.Default != nil {
			if _, err := coerce(x.Type, x.Default); err != nil {
				v.add(path+".default", "%v", err)
			}
		}
	}
}

func (v *validator) settings(s Settings) {
	if !slices.Contains([]Policy{"", PolicyQueue, PolicySupersede, PolicySkip}, s.Policy) {
		v.add("settings.policy", "%q: want queue, supersede or skip", s.Policy)
	}
	v.template("settings.concurrency_key", s.ConcurrencyKey)
	for field, n := range map[string]int{"max_concurrent": s.MaxConcurrent, "max_per_hour": s.MaxPerHour} {
		if n < -1 || n > 10000 {
			v.add("settings."+field, "%d: want 1 to 10000, 0 for the default or -1 for no cap", n)
		}
	}
}

// template checks a template's syntax and that it names only known
// inputs and blocks that ran before.
func (v *validator) template(path, t string) {
	if len(t) > v.lim.MaxText {
		v.add(path, "%d bytes, at most %d", len(t), v.lim.MaxText)
		return
	}
	rs, err := refs(t)
	if err != nil {
		v.add(path, "%v", err)
		return
	}
	for _, r := range rs {
		switch {
		case r.kind == refInput && !v.inputs[r.name]:
			v.add(path, "{{inputs.%s}} names no input (inputs: %s)", r.name, strings.Join(sortedKeys(v.inputs), ", "))
		case r.kind == refStep && !slices.Contains(v.ran, r.name):
			_, exists := v.ids[r.name]
			switch {
			case v.seen[r.name]:
				v.add(path, "{{steps.%s.output}} is in a branch or loop that may not have run before this block", r.name)
			case exists:
				v.add(path, "{{steps.%s.output}} is this block's own output or a later one's: a cycle", r.name)
			default:
				v.add(path, "{{steps.%s.output}} names no block", r.name)
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// number checks a template that must render a positive number once run
// (a literal is checked now).
func (v *validator) number(path, t string) {
	if t == "" {
		v.add(path, "required")
		return
	}
	if !strings.Contains(t, "{{") {
		if n, err := strconv.Atoi(t); err != nil || n <= 0 {
			v.add(path, "%q: want a positive number or a template", t)
		}
		return
	}
	v.template(path, t)
}
