package cli_test

import "testing"

// TestTypoSuggestions: typos of commands and flags are named with what
// they are typos of; object arguments complete from the server.
func TestTypoSuggestions(t *testing.T) {
	t.Parallel()
	runTable(t, newServer, []cmdTest{
		{name: "a subcommand of the root", args: []string{"sesion", "list"}, code: 2, contains: []string{},
			errContain: []string{`unknown command "sesion" for "engrams"; did you mean "session"`}},
		{name: "a subcommand of a group", args: []string{"task", "strat"}, code: 2, contains: []string{},
			errContain: []string{`did you mean "start"?`}},
		{name: "a flag", args: []string{"session", "list", "--jsn"}, code: 2, contains: []string{},
			errContain: []string{"unknown flag: --jsn", "hint: did you mean --json?"}},
		{name: "completing a session id", args: []string{"__complete", "session", "exec", ""}, code: 0, contains: []string{"s1\t"}, errContain: []string{}},
		{name: "get and its alias show", args: []string{"session", "show", "s1", "--json"}, code: 0, contains: []string{`"id": "s1"`}},
	})
}
