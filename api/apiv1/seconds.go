package apiv1

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Seconds is a time setting in whole seconds (idle_timeout_s,
// max_lifetime_s) as a request may give it: a JSON number (0: the
// server's default, -1: never), or a string in the CLI's forms (see
// ParseSeconds). Answers always carry the number.
type Seconds int

// UnmarshalJSON takes a number or a ParseSeconds string.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*s = Seconds(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("want whole seconds or a duration such as \"15m\" or \"never\", not %.40s", b)
	}
	n, err := ParseSeconds(str)
	if err != nil {
		return err
	}
	*s = Seconds(n)
	return nil
}

// ParseSeconds reads a time setting as the CLI's --idle-timeout and
// --max-lifetime do: a duration of at least 1s ("15m", "1h30m"; rounded
// up to whole seconds), "0" or "" for the server's default (0), or "never"
// or "none" (-1).
func ParseSeconds(s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "0":
		return 0, nil
	case "never", "none":
		return -1, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%.40q: want a duration of at least 1s (e.g. 15m), 0 for the server's default, or never", s)
	}
	return int((d + time.Second - 1) / time.Second), nil
}
