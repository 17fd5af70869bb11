package firecracker

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// drain reads a FIFO Firecracker writes its log or metrics to and keeps
// only the last max bytes, so a chatty VMM never blocks on a full pipe and
// never grows host memory.
type drain struct {
	f    *os.File
	max  int
	mu   sync.Mutex
	buf  []byte
	done chan struct{}
}

// makeFIFO creates a named pipe at path (replacing what was there),
// owned by uid/gid when they are not negative.
func makeFIFO(path string, uid, gid int) error {
	_ = os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("make fifo %s: %w", path, err)
	}
	if uid >= 0 && gid >= 0 {
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("make fifo %s: %w", path, err)
		}
	}
	return nil
}

// startDrain opens the FIFO at path for reading and drains it until stop.
// Opening read-write never blocks and never sees EOF when a writer leaves.
func startDrain(path string, max int) (*drain, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open fifo %s: %w", path, err)
	}
	d := &drain{f: f, max: max, done: make(chan struct{})}
	go d.run()
	return d, nil
}

func (d *drain) run() {
	defer close(d.done)
	p := make([]byte, 8192)
	for {
		n, err := d.f.Read(p)
		if n > 0 {
			d.keep(p[:n])
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			return
		}
	}
}

func (d *drain) keep(p []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf = append(d.buf, p...)
	if over := len(d.buf) - d.max; over > 0 {
		d.buf = append(d.buf[:0], d.buf[over:]...)
	}
}

// tail returns what was kept.
func (d *drain) tail() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return string(d.buf)
}

// stop closes the FIFO and waits for the reader.
func (d *drain) stop() {
	if d == nil {
		return
	}
	_ = d.f.Close()
	<-d.done
}
