package broker

import "io"

// Scrubber lets the package's outside tests drive the scrubber.
type Scrubber = scrubber

// NewScrubber is newScrubber.
func NewScrubber(ph string, secrets ...string) *Scrubber { return newScrubber(ph, secrets...) }

// Writer is the scrubber's stream.
func (s *scrubber) Writer(w io.Writer) io.WriteCloser { return s.writer(w) }
