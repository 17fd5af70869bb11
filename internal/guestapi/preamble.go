package guestapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// A single-stream transport (a virtio-serial port) carries one yamux
// session at a time, but neither end sees the other reconnect: a guest
// restored from a snapshot may still be inside the session it had when the
// snapshot was taken, and bytes of an old session may still be in flight.
// So every session opens with a preamble that each end finds by scanning
// lines, discarding whatever came before:
//
//	host → guest  "\nENGRAMS-HELLO <nonce>\n"  repeated (up to helloEvery apart) until answered
//	guest → host  "ENGRAMS-OK <nonce>\n"       once per nonce
//	host → guest  "\nENGRAMS-START <nonce>\n"  once; the yamux session follows
//
// A stale guest session reads the first HELLO as a broken frame and ends;
// the next session answers a later HELLO. Nothing but the preamble comes
// between the last HELLO and START, so yamux starts clean on both ends.
const (
	wordHello  = "ENGRAMS-HELLO "
	wordOK     = "ENGRAMS-OK "
	wordStart  = "ENGRAMS-START "
	helloEvery = 100 * time.Millisecond
)

// greet opens a session on conn from the host side and returns conn with
// any bytes read past the guest's answer still to be read.
func greet(ctx context.Context, conn net.Conn) (net.Conn, error) {
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	fail := func(err error) (net.Conn, error) {
		_ = conn.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("greet guest: %w", err)
	}
	// Closing conn when ctx ends unblocks both the scan and a write.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	br := bufio.NewReader(conn)
	answered := make(chan error, 1)
	go func() { answered <- scanFor(br, wordOK, nonce) }()
	// A stale guest session swallows what arrives before it breaks, so the
	// first repeats come soon.
	next := 10 * time.Millisecond
	tick := time.NewTimer(next)
	defer tick.Stop()
	for {
		if _, err := io.WriteString(conn, "\n"+wordHello+nonce+"\n"); err != nil {
			_ = conn.Close()
			<-answered
			return fail(err)
		}
		select {
		case err := <-answered:
			if err == nil {
				_, err = io.WriteString(conn, "\n"+wordStart+nonce+"\n")
			}
			if err != nil || !stop() {
				return fail(errors.Join(err, ctx.Err()))
			}
			return &bufferedConn{Conn: conn, r: br}, nil
		case <-tick.C:
			next = min(2*next, helloEvery)
			tick.Reset(next)
		}
	}
}

// AwaitHello is the guest side of the preamble: it answers the host's
// HELLO and returns once START arrives, with rw's remaining bytes (the
// yamux session) readable from the returned reader.
func AwaitHello(rw io.ReadWriter) (io.Reader, error) {
	br := bufio.NewReader(rw)
	answered := ""
	for {
		word, nonce, err := nextWord(br)
		if err != nil {
			return nil, fmt.Errorf("await host hello: %w", err)
		}
		switch {
		case word == wordHello && nonce != answered:
			if _, err := io.WriteString(rw, wordOK+nonce+"\n"); err != nil {
				return nil, fmt.Errorf("answer host hello: %w", err)
			}
			answered = nonce
		case word == wordStart && nonce == answered:
			return br, nil
		}
	}
}

// scanFor reads lines until one is word followed by nonce.
func scanFor(br *bufio.Reader, word, nonce string) error {
	for {
		w, n, err := nextWord(br)
		if err != nil {
			return err
		}
		if w == word && n == nonce {
			return nil
		}
	}
}

// nextWord reads the next line that starts with a preamble word and
// returns the word and its argument; other lines (old session bytes) are
// skipped, however long.
func nextWord(br *bufio.Reader) (word, arg string, err error) {
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) { // the rest of a long line
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return "", "", err
			}
			continue
		}
		if err != nil {
			return "", "", err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		for _, w := range []string{wordHello, wordOK, wordStart} {
			if a, ok := bytes.CutPrefix(line, []byte(w)); ok {
				return w, string(a), nil
			}
		}
	}
}

// bufferedConn is a net.Conn whose reads first drain r (bytes a preamble
// scan read ahead).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
