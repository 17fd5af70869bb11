package guestapi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxFilePath bounds the ?path= of the file routes (Linux's PATH_MAX).
const MaxFilePath = 4096

// maxEcho bounds how much of a refused input an answer repeats.
const maxEcho = 64

// CheckFilePath says what is wrong with p as the ?path= of a file route:
// it must be absolute, at most MaxFilePath bytes and hold no NUL (which
// no file name can). Every hop checks it, so a bad path is refused with a
// 400 before it reaches a file system; the daemon then cleans it.
func CheckFilePath(p string) error {
	switch {
	case p == "":
		return errors.New("missing query parameter: path")
	case len(p) > MaxFilePath:
		return fmt.Errorf("path is %d bytes, over the limit of %d", len(p), MaxFilePath)
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("path holds a NUL byte")
	case p[0] != '/':
		return errors.New("path must be absolute")
	}
	return nil
}

// FilePathError is the refusal of a bad ?path= (CheckFilePath's err):
// what is wrong and a bounded quote of it.
func FilePathError(p string, err error) string {
	if p == "" {
		return err.Error()
	}
	return err.Error() + ": " + QuoteInput(p)
}

// QuoteInput is s as a refusal repeats it: quoted (control bytes escaped)
// and cut after 64 bytes.
func QuoteInput(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}
