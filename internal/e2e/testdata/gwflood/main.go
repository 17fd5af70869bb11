// Command gwflood runs in a guest as a hostile (or runaway) process: it
// opens -n connections to the model gateway at once, sees which the guest
// daemon closed at once and which it kept, holds those for -hold and
// prints the counts as JSON. Built by the e2e tests; never shipped.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4780", "the gateway listener")
	n := flag.Int("n", 1000, "connections to open")
	hold := flag.Duration("hold", 20*time.Second, "how long to hold the kept ones")
	settle := flag.Duration("settle", 2*time.Second, "how long to wait before looking at the kept ones again")
	flag.Parse()
	var (
		mu                 sync.Mutex
		dialFailed, closed int
		kept               []net.Conn
		wg                 sync.WaitGroup
	)
	for range *n {
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			dialFailed++
			continue
		}
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, err := c.Read(make([]byte, 1))
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				kept = append(kept, c)
				return
			}
			closed++
			_ = c.Close()
		})
	}
	wg.Wait()
	// A daemon slowed down (an emulated guest under load) may close a
	// connection over its cap after the first window: look again, so only
	// those it really holds count as kept.
	time.Sleep(*settle)
	var still []net.Conn
	for _, c := range kept {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				still = append(still, c)
				return
			}
			closed++
			_ = c.Close()
		})
	}
	wg.Wait()
	kept = still
	out, _ := json.Marshal(map[string]int{"dial_failed": dialFailed, "closed": closed, "kept": len(kept)})
	fmt.Println(string(out))
	_ = os.Stdout.Sync()
	time.Sleep(*hold)
	for _, c := range kept {
		_ = c.Close()
	}
}
