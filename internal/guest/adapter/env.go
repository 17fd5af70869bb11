package adapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/guest/durable"
	"github.com/engrams/engrams/internal/guestapi"
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// harnessBaseEnv keeps a harness quiet: no telemetry, error reports,
// auto-updates or surveys (claude and codex read these).
func harnessBaseEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_BUG_COMMAND=1",
		"DISABLE_NON_ESSENTIAL_MODEL_CALLS=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1",
		"CODEX_DISABLE_UPDATE_CHECK=1",
	}
}

// harnessEnv is the harness's environment: the quiet base, the session's
// env (Config.Env), the prompt's env, HOME, and for each descriptor
// credential its placeholder (when the prompt grants one) and the gateway
// URL. Nothing else secret is ever put there.
func (a *Adapter) harnessEnv(d guestapi.HarnessDescriptor, p guestapi.PromptPayload, gateway string) []string {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range append(harnessBaseEnv(), a.cfg.Env...) {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			set(k, v)
		}
	}
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		set(k, p.Env[k])
	}
	set("HOME", a.cfg.HarnessHome)
	for _, c := range d.Credentials {
		if v, ok := p.Credentials[c.Kind]; ok {
			set(c.Env, v)
		} else {
			delete(env, c.Env)
		}
		if c.BaseURLEnv != "" {
			set(c.BaseURLEnv, gateway+"/"+c.Kind)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		if v, ok := env[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

func readTurnState(dir string) (turnState, error) {
	var st turnState
	b, err := os.ReadFile(filepath.Join(dir, turnsFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read harness turn state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("read harness turn state: bad content: %w", err)
	}
	return st, nil
}

// writeTurnState replaces the turn state atomically and durably.
func writeTurnState(dir string, st turnState) error {
	b, err := json.Marshal(st)
	if err == nil {
		err = durable.WriteFileAtomic(dir, turnsFile, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("write harness turn state: %w", err)
	}
	return nil
}
