package automations

import (
	"fmt"
	"regexp"
	"strings"
)

// A template is text with {{ref}} places. A ref is inputs.NAME,
// trigger.PATH (a dotted path into the trigger's payload) or
// steps.ID.output (a block that ran before).
var placeRE = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// refKind is what a template place refers to.
type refKind int

const (
	refInput refKind = iota
	refTrigger
	refStep
)

type ref struct {
	kind refKind
	name string // the input, the trigger path or the step id
}

// refs parses the places of a template.
func refs(tmpl string) ([]ref, error) {
	if strings.Count(tmpl, "{{") != strings.Count(tmpl, "}}") {
		return nil, fmt.Errorf("unbalanced {{ }}")
	}
	var out []ref
	for _, m := range placeRE.FindAllStringSubmatch(tmpl, -1) {
		parts := strings.Split(m[1], ".")
		switch {
		case len(parts) == 2 && parts[0] == "inputs" && nameRE.MatchString(parts[1]):
			out = append(out, ref{refInput, parts[1]})
		case len(parts) >= 2 && parts[0] == "trigger" && allNames(parts[1:]):
			out = append(out, ref{refTrigger, strings.Join(parts[1:], ".")})
		case len(parts) == 3 && parts[0] == "steps" && parts[2] == "output" && nameRE.MatchString(parts[1]):
			out = append(out, ref{refStep, parts[1]})
		default:
			return nil, fmt.Errorf("{{%s}}: want inputs.NAME, trigger.PATH or steps.ID.output", m[1])
		}
	}
	return out, nil
}

func allNames(parts []string) bool {
	for _, p := range parts {
		if !nameRE.MatchString(p) {
			return false
		}
	}
	return true
}

// Render fills a template's places from values: "inputs.NAME",
// "trigger.PATH" and "steps.ID.output" keys, as refs name them. A place
// without a value renders empty.
func Render(tmpl string, values map[string]string) string {
	return placeRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		key := strings.TrimSpace(placeRE.FindStringSubmatch(m)[1])
		return values[key]
	})
}

// RenderQuoted is Render with each value passed through quote(ref, value)
// before it is placed: prompts mark what came from outside, posts escape
// what they did not write.
func RenderQuoted(tmpl string, values map[string]string, quote func(ref, value string) string) string {
	return placeRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		key := strings.TrimSpace(placeRE.FindStringSubmatch(m)[1])
		return quote(key, values[key])
	})
}
