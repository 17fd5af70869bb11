package automations

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// collectIDs records every block id of the tree (duplicates are
// problems), so a template naming a later block is told apart from one
// naming no block.
func (v *validator) collectIDs(path string, bs []Block) {
	for i, b := range bs {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.blocks++
		switch {
		case !nameRE.MatchString(b.ID):
			v.add(p+".id", "%q: want an id of letters, digits, _ and -", b.ID)
		case v.ids[b.ID] != "":
			v.add(p+".id", "%q is also %s's id", b.ID, v.ids[b.ID])
		default:
			v.ids[b.ID], v.kinds[b.ID] = p, b.Kind
		}
		v.collectIDs(p+".then", b.Then)
		v.collectIDs(p+".else", b.Else)
		v.collectIDs(p+".body", b.Body)
	}
}

// blockList checks bs in order: each block may use the outputs of those
// before it (in this list and its enclosing ones).
func (v *validator) blockList(path string, bs []Block, depth int) {
	if depth == 1 {
		v.collectIDs(path, bs)
		if v.blocks > v.lim.MaxBlocks {
			v.add(path, "%d blocks, at most %d", v.blocks, v.lim.MaxBlocks)
			return
		}
	}
	if depth > v.lim.MaxDepth {
		v.add(path, "nested %d deep, at most %d", depth, v.lim.MaxDepth)
		return
	}
	for i, b := range bs {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.block(p, b, depth)
		v.ran = append(v.ran, b.ID)
		v.seen[b.ID] = true
	}
}

// block checks one block's fields for its kind.
func (v *validator) block(p string, b Block, depth int) {
	need := func(field, val string) {
		if val == "" {
			v.add(p+"."+field, "required by %s", b.Kind)
			return
		}
		v.template(p+"."+field, val)
	}
	task := func() {
		switch {
		case b.Task == "":
			v.add(p+".task", "required by %s: the id of a start_task block before it", b.Kind)
		case v.kinds[b.Task] != BlockStartTask || !slices.Contains(v.ran, b.Task):
			v.add(p+".task", "%q is not a start_task block that runs before this one", b.Task)
		}
	}
	switch b.Kind {
	case BlockStartTask:
		need("profile", b.Profile)
		need("prompt", b.Prompt)
	case BlockSendPrompt:
		task()
		need("prompt", b.Prompt)
	case BlockWaitIdle:
		task()
		if b.Timeout != "" {
			if d, err := time.ParseDuration(b.Timeout); err != nil || d <= 0 || d > v.lim.MaxWait {
				v.add(p+".timeout", "%q: want a duration up to %s (e.g. 30m)", b.Timeout, v.lim.MaxWait)
			}
		}
	case BlockRunCommand:
		task()
		v.command(p, b)
	case BlockReadFile:
		task()
		need("path", b.Path)
	case BlockWriteFile:
		task()
		need("path", b.Path)
		v.template(p+".content", b.Content)
	case BlockEndSession:
		task()
	case BlockOpenPR:
		task()
		need("repo", b.Repo)
		need("title", b.Title)
	case BlockPostSlack:
		need("channel", b.Channel)
		need("text", b.Text)
	case BlockGitHubComment, BlockGitHubReview:
		need("repo", b.Repo)
		v.number(p+".number", b.Number)
		need("text", b.Text)
	case BlockGitHubFile:
		need("repo", b.Repo)
		need("path", b.Path)
		v.template(p+".ref", b.Ref)
	case BlockLinearComment:
		need("issue", b.Issue)
		need("text", b.Text)
	case BlockCondition:
		v.condition(p, b, depth)
		return
	case BlockLoop:
		v.loop(p, b, depth)
		return
	default:
		v.add(p+".kind", "unknown block %q", b.Kind)
		return
	}
	if len(b.Then)+len(b.Else)+len(b.Body) > 0 {
		v.add(p, "only condition and loop blocks hold blocks")
	}
	if len(b.Env) > 0 && b.Kind != BlockRunCommand {
		v.add(p+".env", "only run_command takes env")
	}
}

// condition checks a condition block: its test and both branches, each
// seeing only the outputs of what ran before the condition.
func (v *validator) condition(p string, b Block, depth int) {
	if b.If == "" {
		v.add(p+".if", "required by %s", b.Kind)
	}
	v.template(p+".if", b.If)
	if len(b.Then) == 0 && len(b.Else) == 0 {
		v.add(p, "a condition with neither then nor else does nothing")
	}
	before := len(v.ran)
	v.blockList(p+".then", b.Then, depth+1)
	v.ran = v.ran[:before] // else does not see then's outputs
	v.blockList(p+".else", b.Else, depth+1)
	v.ran = v.ran[:before] // after the condition, neither branch is sure to have run
}

// loop checks a loop block: its bound, its test and its body.
func (v *validator) loop(p string, b Block, depth int) {
	if b.Max <= 0 || b.Max > v.lim.MaxLoop {
		v.add(p+".max", "%d: want 1 to %d passes", b.Max, v.lim.MaxLoop)
	}
	v.template(p+".while", b.While)
	if len(b.Body) == 0 {
		v.add(p+".body", "a loop needs a body")
	}
	before := len(v.ran)
	v.blockList(p+".body", b.Body, depth+1)
	v.ran = v.ran[:before] // a loop may run zero passes
}

// envNameRE is an environment variable's name a run_command may set.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// command checks a run_command: its command is shell text with no
// template place (a value from a pull request's branch name or a chat
// message placed in it would be run as code); values reach it through
// Env, each a template, read by the command as "$NAME".
func (v *validator) command(p string, b Block) {
	switch {
	case b.Command == "":
		v.add(p+".command", "required by %s", b.Kind)
	case strings.Contains(b.Command, "{{"):
		v.add(p+".command", "a command takes no {{…}}: a value placed in shell text runs as code. Give it in env "+
			"(env: {NAME: \"{{trigger.head_ref}}\"}) and use \"$NAME\" in the command")
	case len(b.Command) > v.lim.MaxText:
		v.add(p+".command", "%d bytes, at most %d", len(b.Command), v.lim.MaxText)
	}
	if len(b.Env) > 32 {
		v.add(p+".env", "%d variables, at most 32", len(b.Env))
	}
	for _, name := range slices.Sorted(maps.Keys(b.Env)) {
		val := b.Env[name]
		switch {
		case !envNameRE.MatchString(name):
			v.add(p+".env."+name, "%q: want a name of letters, digits and _", name)
		case slices.ContainsFunc(reservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(strings.ToUpper(name), p) }),
			slices.Contains(reservedEnv, name):
			v.add(p+".env."+name, "%q is set by engrams or the shell; choose another name", name)
		default:
			v.template(p+".env."+name, val)
		}
	}
}

// reservedEnv are variables a block's env may not set, and
// reservedEnvPrefixes the names beginning so: they change what runs.
var (
	reservedEnv = []string{"PATH", "HOME", "SHELL", "IFS", "ENV", "BASH_ENV", "PS4", "CDPATH", "GCONV_PATH", "PROMPT_COMMAND",
		"PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT"}
	reservedEnvPrefixes = []string{"ENGRAMS_", "LD_", "BASH_FUNC_", "GIT_CONFIG", "DYLD_"}
)
