package guestapi

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// validDescriptorJSON is a descriptor every field of which is set; the
// table below breaks one thing at a time.
const validDescriptorJSON = `{
  "format": 1,
  "name": "claude-code",
  "version": "2.1.197",
  "entrypoint": ["bin/node", "lib/claude-code/cli.js"],
  "protocol": "claude-stream-json",
  "models": ["sonnet", "opus", "*"],
  "modes": ["bypassPermissions", "plan"],
  "credentials": [{"kind": "anthropic_api_key", "env": "ANTHROPIC_API_KEY", "base_url_env": "ANTHROPIC_BASE_URL"}],
  "hosts": ["api.anthropic.com:443", "*.example.com", "10.0.0.1", "[::1]:8080", "::1"],
  "requires": {"libc": "glibc", "glibc_min": "2.28", "libs": ["libstdc++.so.6"]}
}`

// withField returns validDescriptorJSON with one top-level field replaced
// (or removed, when raw is "").
func withField(t *testing.T, field, raw string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(validDescriptorJSON), &m); err != nil {
		t.Fatal(err)
	}
	if raw == "" {
		delete(m, field)
	} else {
		m[field] = json.RawMessage(raw)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// descriptorCase is a document (validDescriptorJSON with field set to
// raw, or json) and what ParseHarnessDescriptor says of it.
type descriptorCase struct {
	name, field, raw string
	json             string // whole document instead of field/raw
	want             string // "" = valid; else a substring of the error
}

var descriptorCases = []descriptorCase{
	{name: "valid", json: validDescriptorJSON},
	{name: "minimal", json: `{"format":1,"name":"shell","version":"1","entrypoint":["bin/sh-harness"],"protocol":"shell","models":[],"modes":[],"requires":{"libc":"none"}}`},
	{name: "nulls for lists", field: "credentials", raw: `null`},
	{name: "unknown field", json: strings.Replace(validDescriptorJSON, `"format": 1,`, `"format": 1, "extra": true,`, 1), want: `unknown field "extra"`},
	{name: "unknown nested field", field: "requires", raw: `{"libc":"none","arch":"x86_64"}`, want: `unknown field "arch"`},
	{name: "trailing data", json: validDescriptorJSON + `{}`, want: "data after the JSON object"},
	{name: "not json", json: `format: 1`, want: "invalid character"},
	{name: "wrong type", field: "entrypoint", raw: `"bin/claude"`, want: "cannot unmarshal"},
	{name: "format 2", field: "format", raw: `2`, want: "format is 2"},
	{name: "format missing", field: "format", want: "format is 0"},
	{name: "name missing", field: "name", want: `name ""`},
	{name: "name traversal", field: "name", raw: `".."`, want: `name ".."`},
	{name: "name slash", field: "name", raw: `"a/b"`, want: `name "a/b"`},
	{name: "name upper case", field: "name", raw: `"Claude"`, want: `name "Claude"`},
	{name: "name too long", field: "name", raw: `"` + strings.Repeat("a", 65) + `"`, want: "name"},
	{name: "version slash", field: "version", raw: `"1/2"`, want: `version "1/2"`},
	{name: "version dot", field: "version", raw: `"."`, want: `version "."`},
	{name: "version semver build", field: "version", raw: `"1.0.0-rc.1+build.5"`},
	{name: "entrypoint empty", field: "entrypoint", raw: `[]`, want: "entrypoint has 0 elements"},
	{name: "entrypoint absolute", field: "entrypoint", raw: `["/usr/bin/node"]`, want: "is absolute"},
	{name: "entrypoint dotdot", field: "entrypoint", raw: `["bin/../../etc/passwd"]`, want: "leaves the bundle"},
	{name: "entrypoint leading dotdot", field: "entrypoint", raw: `["../x"]`, want: "leaves the bundle"},
	{name: "entrypoint dot", field: "entrypoint", raw: `["."]`, want: "leaves the bundle"},
	{name: "entrypoint unclean", field: "entrypoint", raw: `["./bin/claude"]`, want: "not clean"},
	{name: "entrypoint double slash", field: "entrypoint", raw: `["bin//claude"]`, want: "not clean"},
	{name: "entrypoint control char", field: "entrypoint", raw: `["bin/cl\naude"]`, want: "control characters"},
	{name: "entrypoint backslash", field: "entrypoint", raw: `["bin\\claude"]`, want: "backslashes"},
	{name: "protocol unknown", field: "protocol", raw: `"acp"`, want: `protocol "acp"`},
	{name: "model with space", field: "models", raw: `["claude sonnet"]`, want: "models[0]"},
	{name: "model twice", field: "models", raw: `["a","a"]`, want: "listed twice"},
	{name: "wildcard first", field: "models", raw: `["*","a"]`, want: "after the default"},
	{name: "wildcard in modes", field: "modes", raw: `["plan","*"]`, want: "only in models"},
	{name: "mode empty", field: "modes", raw: `[""]`, want: "modes[0]"},
	{name: "credential kind", field: "credentials", raw: `[{"kind":"Anthropic","env":"K"}]`, want: "credentials[0].kind"},
	{name: "credential env lower", field: "credentials", raw: `[{"kind":"k","env":"api_key"}]`, want: "credentials[0].env"},
	{name: "credential env missing", field: "credentials", raw: `[{"kind":"k"}]`, want: "credentials[0].env"},
	{name: "credential base url env bad", field: "credentials", raw: `[{"kind":"k","env":"K","base_url_env":"A-B"}]`, want: "base_url_env"},
	{name: "credential env twice", field: "credentials", raw: `[{"kind":"a","env":"K"},{"kind":"b","env":"K"}]`, want: "used twice"},
	{name: "host url", field: "hosts", raw: `["https://api.example.com"]`, want: "hosts[0]"},
	{name: "host upper case", field: "hosts", raw: `["API.example.com"]`, want: "lower-case"},
	{name: "host port zero", field: "hosts", raw: `["example.com:0"]`, want: "port"},
	{name: "host port text", field: "hosts", raw: `["example.com:https"]`, want: "port"},
	{name: "host empty", field: "hosts", raw: `[""]`, want: "hosts[0]"},
	{name: "host twice", field: "hosts", raw: `["a.com","a.com"]`, want: "listed twice"},
	{name: "libc unknown", field: "requires", raw: `{"libc":"bionic"}`, want: `requires.libc "bionic"`},
	{name: "libc missing", field: "requires", raw: `{}`, want: `requires.libc ""`},
	{name: "glibc_min with musl", field: "requires", raw: `{"libc":"musl","glibc_min":"2.28"}`, want: "glibc_min"},
	{name: "glibc_min malformed", field: "requires", raw: `{"libc":"glibc","glibc_min":"2.28.1"}`, want: "glibc_min"},
	{name: "libs when static", field: "requires", raw: `{"libc":"none","libs":["libz.so.1"]}`, want: "loads no shared libraries"},
	{name: "lib path", field: "requires", raw: `{"libc":"glibc","libs":["/usr/lib/libz.so.1"]}`, want: "requires.libs[0]"},
}

func TestParseDescriptor(t *testing.T) {
	t.Parallel()
	for _, tc := range descriptorCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := tc.json
			if doc == "" {
				doc = withField(t, tc.field, tc.raw)
			}
			d, err := ParseHarnessDescriptor([]byte(doc))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ParseHarnessDescriptor: %v", err)
				}
				again, err := d.Marshal()
				if err != nil {
					t.Fatalf("Marshal: %v", err)
				}
				d2, err := ParseHarnessDescriptor(again)
				if err != nil || !reflect.DeepEqual(normalized(d), normalized(d2)) {
					t.Fatalf("round trip: %v\n%+v\n%+v", err, d, d2)
				}
				return
			}
			if !errors.Is(err, ErrInvalidHarnessDescriptor) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseHarnessDescriptor error = %v, want ErrInvalidHarnessDescriptor mentioning %q", err, tc.want)
			}
		})
	}
}

// normalized makes nil and empty lists equal.
func normalized(d HarnessDescriptor) HarnessDescriptor {
	for _, l := range []*[]string{&d.Models, &d.Modes, &d.Hosts} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if len(d.Credentials) == 0 {
		d.Credentials = nil
	}
	return d
}

func TestValidateListsEveryProblem(t *testing.T) {
	t.Parallel()
	err := HarnessDescriptor{Format: 1, Name: "../x", Version: "", Protocol: "shell", Requires: HarnessRequires{Libc: "none"}}.Validate()
	for _, want := range []string{`name "../x"`, `version ""`, "entrypoint has 0 elements"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not mention %q", err, want)
		}
	}
}

func TestParseDescriptorSizeLimit(t *testing.T) {
	t.Parallel()
	big := strings.Replace(validDescriptorJSON, `"format": 1,`, `"format": 1, "pad": "`+strings.Repeat("x", MaxHarnessDescriptorBytes)+`",`, 1)
	if _, err := ParseHarnessDescriptor([]byte(big)); !errors.Is(err, ErrInvalidHarnessDescriptor) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("ParseHarnessDescriptor of %d bytes: %v", len(big), err)
	}
}

func TestRequiresCompatible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		req        HarnessRequires
		libc, ver  string
		compatible bool
	}{
		{"static on glibc", HarnessRequires{Libc: LibcNone}, LibcGlibc, "2.36", true},
		{"static on musl", HarnessRequires{Libc: LibcNone}, LibcMusl, "", true},
		{"static on no libc", HarnessRequires{Libc: LibcNone}, LibcNone, "", true},
		{"glibc on glibc", HarnessRequires{Libc: LibcGlibc}, LibcGlibc, "", true},
		{"glibc on musl", HarnessRequires{Libc: LibcGlibc}, LibcMusl, "", false},
		{"glibc on no libc", HarnessRequires{Libc: LibcGlibc}, LibcNone, "", false},
		{"musl on glibc", HarnessRequires{Libc: LibcMusl}, LibcGlibc, "2.36", false},
		{"musl on musl", HarnessRequires{Libc: LibcMusl}, LibcMusl, "", true},
		{"glibc new enough", HarnessRequires{Libc: LibcGlibc, GlibcMin: "2.28"}, LibcGlibc, "2.36", true},
		{"glibc equal", HarnessRequires{Libc: LibcGlibc, GlibcMin: "2.28"}, LibcGlibc, "2.28", true},
		{"glibc too old", HarnessRequires{Libc: LibcGlibc, GlibcMin: "2.28"}, LibcGlibc, "2.17", false},
		{"glibc minor compare numeric", HarnessRequires{Libc: LibcGlibc, GlibcMin: "2.9"}, LibcGlibc, "2.17", true},
		{"glibc version unknown", HarnessRequires{Libc: LibcGlibc, GlibcMin: "2.28"}, LibcGlibc, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.req.Compatible(tc.libc, tc.ver)
			if tc.compatible && err != nil {
				t.Fatalf("Compatible: %v", err)
			}
			if !tc.compatible && !errors.Is(err, ErrHarnessIncompatible) {
				t.Fatalf("Compatible = %v, want ErrHarnessIncompatible", err)
			}
		})
	}
}

func TestArgv(t *testing.T) {
	t.Parallel()
	d := HarnessDescriptor{Entrypoint: []string{"bin/node", "lib/claude-code/cli.js"}}
	got := d.Argv(HarnessMountPoint)
	want := []string{"/.engrams-harness/bin/node", "/.engrams-harness/lib/claude-code/cli.js"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Argv = %q, want %q", got, want)
	}
}

func TestParseShellEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		ok   bool
	}{
		{`{"type":"ready","harness":"shell","version":"1"}`, true},
		{`{"type":"output","text":"a\tb"}`, true},
		{`{"type":"result","exit_code":3}`, true},
		{`{"type":"result"}`, false},
		{`{"type":"bogus"}`, false},
		{`not json`, false},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			t.Parallel()
			if _, err := ParseShellEvent([]byte(tc.line)); (err == nil) != tc.ok {
				t.Fatalf("ParseShellEvent(%s) = %v, want ok=%v", tc.line, err, tc.ok)
			}
		})
	}
}
