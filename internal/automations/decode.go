package automations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// MaxDefinitionBytes bounds a definition as sent (JSON or YAML).
const MaxDefinitionBytes = 256 << 10

// ErrBadDefinition is the category of a definition that cannot be read.
var ErrBadDefinition = errors.New("bad automation definition")

// DecodeDefinition reads a definition from JSON or YAML (a JSON document
// starts with '{'); unknown fields are refused, so a misspelled key is
// named, not ignored.
func DecodeDefinition(raw []byte) (Definition, error) {
	var d Definition
	if len(raw) > MaxDefinitionBytes {
		return d, fmt.Errorf("%w: %d bytes, at most %d", ErrBadDefinition, len(raw), MaxDefinitionBytes)
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return d, fmt.Errorf("%w: empty", ErrBadDefinition)
	}
	if trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return Definition{}, fmt.Errorf("%w: %v", ErrBadDefinition, err)
		}
		if dec.More() {
			return Definition{}, fmt.Errorf("%w: more than one JSON document", ErrBadDefinition)
		}
		return d, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(trimmed))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return Definition{}, fmt.Errorf("%w: %v", ErrBadDefinition, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Definition{}, fmt.Errorf("%w: more than one YAML document", ErrBadDefinition)
	}
	return d, nil
}
