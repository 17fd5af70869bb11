package automations

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// coerce makes v a value of type t: a number from a number or a numeric
// string, a boolean from a boolean or "true"/"false", a string from a
// string, any JSON for json.
func coerce(t InputType, v any) (any, error) {
	switch t {
	case InputString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case InputNumber:
		switch n := v.(type) {
		case float64:
			if !math.IsInf(n, 0) && !math.IsNaN(n) {
				return n, nil
			}
		case int:
			return float64(n), nil
		case string:
			if f, err := strconv.ParseFloat(n, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, nil
			}
		}
	case InputBoolean:
		switch b := v.(type) {
		case bool:
			return b, nil
		case string:
			if p, err := strconv.ParseBool(b); err == nil {
				return p, nil
			}
		}
	case InputJSON:
		if _, err := json.Marshal(v); err == nil {
			return v, nil
		}
	}
	return nil, fmt.Errorf("%v is not a %s", short(v), t)
}

func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// ResolveInputs checks a run's inputs against the definition: every
// required one given, none unknown, each of its type (coerced), defaults
// filled in. The problems name the input.
func ResolveInputs(defs []Input, given map[string]any) (map[string]any, []Problem) {
	out := map[string]any{}
	var probs []Problem
	known := map[string]bool{}
	for _, d := range defs {
		known[d.Name] = true
		v, ok := given[d.Name]
		if !ok || v == nil {
			switch {
			case d.Default != nil:
				v = d.Default
			case d.Required:
				probs = append(probs, Problem{Path: "inputs." + d.Name, Msg: "required"})
				continue
			default:
				continue
			}
		}
		c, err := coerce(d.Type, v)
		if err != nil {
			probs = append(probs, Problem{Path: "inputs." + d.Name, Msg: err.Error()})
			continue
		}
		out[d.Name] = c
	}
	for k := range given {
		if !known[k] {
			probs = append(probs, Problem{Path: "inputs." + k, Msg: "no such input"})
		}
	}
	slices.SortFunc(probs, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	return out, probs
}
